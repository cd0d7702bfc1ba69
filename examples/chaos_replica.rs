//! The chaos suite's embedded replica: a Rust program that runs the suite's
//! probe jobs in process through the `cronlease` library API, where `cronlease run`
//! runs them as shell commands. `chaos --replica-kind embedded` starts it in
//! place of `cronlease run`, with the same command line, signals and log:
//!
//! ```sh
//! cargo run --release --example chaos_replica -- run --config r1/jobs.toml
//! ```
//!
//! - **Config.** The file is the suite's `rN/jobs.toml`, loaded with
//!   [`Config::load`]: `[redis]` (one `url`, `key_prefix`,
//!   `command_timeout`, `connect_timeout`) becomes the [`RedisSettings`],
//!   `[daemon]` the scheduler's settings (`replica_id`, `lease`,
//!   `heartbeat`, `shutdown_grace`, `kill_grace`, `state_dir`, `history`),
//!   and every `[jobs.NAME]` a [`JobBuilder`] with the job's schedule, time
//!   zone, overlap, misfire, grace, retries, `on_holder_lost` and timeout.
//! - **Handlers.** Each job's `shell` command is the probe the suite writes
//!   (`harness/config.rs`), in a fixed shape:
//!   `echo "start …" >> 'EFFECTS'; BODY; echo "end …" >> 'EFFECTS'`, BODY
//!   being `true` or `sleep SECONDS`. The effects file and the body are
//!   taken from it (a command of another shape is refused, like an invalid
//!   config), so the config file stays the one source of truth. The handler
//!   does what the shell would: appends the `start` line (`start JOB
//!   TICK_MS FENCE REPLICA RUN_ID WALL_MS`), waits the body's duration,
//!   appends the `end` line. Told to stop (lost lease, timeout, shutdown)
//!   it returns at once without the `end` line, as the killed shell would.
//!   WALL_MS is the real wall clock: `date +%s%3N` run with `LD_PRELOAD`
//!   removed, per line, as the shell's `$(LD_PRELOAD= date +%s%3N)` does,
//!   since this process may run with libfaketime preloaded.
//! - **Redis.** Connecting is retried until Redis answers (like the daemon,
//!   which waits for it); SIGTERM or SIGINT meanwhile exits 0.
//! - **Signals.** SIGHUP loads the file again and replaces the jobs
//!   ([`Scheduler::set_jobs`]); an invalid file is logged (`reload
//!   rejected, keeping the old job table: …`) and the old jobs kept.
//!   SIGTERM and SIGINT shut the scheduler down ([`Scheduler::shutdown`])
//!   and exit 0.
//! - **Log.** Text on stderr filtered by `RUST_LOG` (default `info`), as the
//!   daemon's: the suite waits for `cronlease::daemon: ready`.

// rustc needs more than its default 128 levels of queries to lay out this
// program's futures (the engine's nested async functions under `select!`).
#![recursion_limit = "256"]

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};
use cronlease::config::{self, Command, Config, Topology};
use cronlease::schedule::{DstGap, DstRepeat};
use cronlease::{Cluster, Job, JobBuilder, RedisSettings, Run, Scheduler};
use tokio::io::AsyncWriteExt;
use tokio::signal::unix::{Signal, SignalKind, signal};
use tracing::{error, info, warn};
use tracing_subscriber::EnvFilter;

/// How long to wait between attempts to reach Redis at start.
const CONNECT_RETRY: Duration = Duration::from_millis(500);

/// An embedded cronlease replica running the chaos suite's probe jobs.
#[derive(Debug, Parser)]
#[command(name = "chaos_replica")]
struct Cli {
    #[command(subcommand)]
    command: Verb,
}

#[derive(Debug, Subcommand)]
enum Verb {
    /// Run the replica (as `cronlease run`).
    Run {
        /// The job table.
        #[arg(long)]
        config: PathBuf,
    },
}

fn main() -> ExitCode {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .init();
    let Cli {
        command: Verb::Run { config },
    } = Cli::parse();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(e) => {
            error!("cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(&config)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            error!("{e:#}");
            ExitCode::FAILURE
        }
    }
}

/// The signals the replica answers.
struct Signals {
    term: Signal,
    int: Signal,
    hup: Signal,
}

impl Signals {
    fn install() -> Result<Signals> {
        Ok(Signals {
            term: signal(SignalKind::terminate()).context("cannot watch SIGTERM")?,
            int: signal(SignalKind::interrupt()).context("cannot watch SIGINT")?,
            hup: signal(SignalKind::hangup()).context("cannot watch SIGHUP")?,
        })
    }

    /// The next SIGTERM or SIGINT.
    async fn stop(&mut self) {
        tokio::select! {
            _ = self.term.recv() => info!("SIGTERM received"),
            _ = self.int.recv() => info!("SIGINT received"),
        }
    }

    /// The next SIGTERM, SIGINT or SIGHUP.
    async fn next(&mut self) -> Event {
        tokio::select! {
            _ = self.term.recv() => {
                info!("SIGTERM received");
                Event::Stop
            }
            _ = self.int.recv() => {
                info!("SIGINT received");
                Event::Stop
            }
            _ = self.hup.recv() => Event::Reload,
        }
    }
}

/// What happened while waiting.
enum Event {
    Stop,
    Reload,
}

async fn run(path: &Path) -> Result<()> {
    // Before anything else: the suite may signal as soon as `ready` is logged.
    let mut signals = Signals::install()?;
    let config = Config::load(path).map_err(|e| anyhow::anyhow!("{e}"))?;
    let jobs = embedded_jobs(&config)?;
    let Some(cluster) = connect(&config, &mut signals).await? else {
        return Ok(());
    };
    let mut scheduler = jobs
        .into_iter()
        .fold(scheduler(&cluster, &config), |builder, job| {
            builder.job(job)
        })
        .start()
        .context("cannot start the scheduler")?;
    loop {
        match signals.next().await {
            Event::Stop => break,
            Event::Reload => reload(path, &mut scheduler),
        }
    }
    scheduler.shutdown().await.context("shutdown failed")?;
    info!("stopped");
    Ok(())
}

/// SIGHUP: the file's jobs replace the running ones, if valid.
fn reload(path: &Path, scheduler: &mut Scheduler) {
    info!(config = %path.display(), "SIGHUP: reloading the job table");
    let jobs = Config::load(path)
        .map_err(|e| anyhow::anyhow!("{e}"))
        .and_then(|config| embedded_jobs(&config));
    let result = jobs.and_then(|jobs| scheduler.set_jobs(jobs).map_err(anyhow::Error::from));
    if let Err(e) = result {
        error!("reload rejected, keeping the old job table: {e:#}");
    }
}

/// The cluster, once Redis answers; `None` when told to stop first.
async fn connect(config: &Config, signals: &mut Signals) -> Result<Option<Cluster>> {
    let redis = &config.redis;
    let Topology::Single(url) = &redis.topology else {
        bail!("only a single `[redis] url` is supported by this example");
    };
    let settings = RedisSettings::url(url)
        .key_prefix(&redis.key_prefix)
        .command_timeout(redis.command_timeout)
        .connect_timeout(redis.connect_timeout);
    loop {
        let attempt = tokio::select! {
            () = signals.stop() => return Ok(None),
            result = Cluster::connect(settings.clone()) => result,
        };
        match attempt {
            Ok(cluster) => return Ok(Some(cluster)),
            Err(e) => warn!("{e}; retrying in {CONNECT_RETRY:?}"),
        }
        tokio::select! {
            () = signals.stop() => return Ok(None),
            () = tokio::time::sleep(CONNECT_RETRY) => {}
        }
    }
}

/// The scheduler with the `[daemon]` settings, no jobs yet.
fn scheduler(cluster: &Cluster, config: &Config) -> cronlease::SchedulerBuilder {
    let daemon = &config.daemon;
    let builder = cluster
        .scheduler()
        .lease(daemon.lease)
        .heartbeat(daemon.heartbeat)
        .shutdown_grace(daemon.shutdown_grace)
        .kill_grace(daemon.kill_grace)
        .state_dir(&daemon.state_dir)
        .history(daemon.history);
    match &daemon.replica_id {
        Some(id) => builder.replica_id(id),
        None => builder,
    }
}

/// Every job of the table, with its probe handler.
fn embedded_jobs(config: &Config) -> Result<Vec<Job>> {
    config.jobs.values().map(embedded_job).collect()
}

fn embedded_job(job: &config::Job) -> Result<Job> {
    let probe = Probe::parse(job)?;
    let dst = job.schedule.dst();
    let mut builder = JobBuilder::new(&job.name, job.schedule.expression())
        .timezone(job.schedule.timezone().name())
        .overlap(job.overlap)
        .misfire(job.misfire)
        .misfire_grace(job.misfire_grace)
        .retries(job.retries)
        .retry_backoff(job.retry_backoff)
        .on_holder_lost(job.on_holder_lost);
    // Only when set: the defaults are not valid on every schedule.
    if dst.gap != DstGap::default() {
        builder = builder.dst_gap(dst.gap);
    }
    if dst.repeat != DstRepeat::default() {
        builder = builder.dst_repeat(dst.repeat);
    }
    if let Some(timeout) = job.timeout {
        builder = builder.timeout(timeout);
    }
    Ok(builder.run(move |run: Run| {
        let probe = probe.clone();
        async move { probe.run(run).await }
    }))
}

/// What a probe job does: its effects file and how long its body takes.
#[derive(Debug, Clone)]
struct Probe {
    effects: PathBuf,
    body: Duration,
}

impl Probe {
    /// From the job's shell command, in the suite's shape:
    /// `echo "start …" >> 'FILE'; BODY; echo "end …" >> 'FILE'`.
    fn parse(job: &config::Job) -> Result<Probe> {
        let Command::Shell(script) = &job.command else {
            bail!("job {}: not a chaos probe (no `shell` command)", job.name);
        };
        let shape = || format!("job {}: not a chaos probe: {script:?}", job.name);
        let (start, rest) = script.split_once("; ").with_context(shape)?;
        let (body, _end) = rest.split_once("; ").with_context(shape)?;
        let (_, file) = start.rsplit_once(" >> ").with_context(shape)?;
        let effects = unquote(file).with_context(shape)?;
        let body = match body.trim() {
            "true" => Duration::ZERO,
            other => {
                let seconds = other
                    .strip_prefix("sleep ")
                    .and_then(|s| s.trim().parse::<f64>().ok())
                    .filter(|s| s.is_finite() && *s >= 0.0)
                    .with_context(shape)?;
                Duration::from_secs_f64(seconds)
            }
        };
        Ok(Probe {
            effects: PathBuf::from(effects),
            body,
        })
    }

    /// The `start` line, the body (cut short when told to stop, without the
    /// `end` line), the `end` line.
    async fn run(&self, mut run: Run) -> Result<()> {
        self.append(&run, "start").await?;
        tokio::select! {
            () = tokio::time::sleep(self.body) => {}
            reason = run.stopped() => {
                // As the killed shell: no `end` line.
                bail!("stopped: {reason:?}");
            }
        }
        self.append(&run, "end").await
    }

    /// Appends `WHAT JOB TICK_MS FENCE REPLICA RUN_ID WALL_MS` (one write).
    async fn append(&self, run: &Run, what: &str) -> Result<()> {
        let line = format!(
            "{what} {} {} {} {} {} {}\n",
            run.job(),
            run.tick().as_millisecond(),
            run.fence(),
            run.replica(),
            run.run_id(),
            real_wall_ms().await?
        );
        let mut file = tokio::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(&self.effects)
            .await
            .with_context(|| format!("cannot open {}", self.effects.display()))?;
        file.write_all(line.as_bytes())
            .await
            .with_context(|| format!("cannot write {}", self.effects.display()))?;
        Ok(())
    }
}

/// `'text'` as the suite's `shell_quote` writes it, unquoted.
fn unquote(word: &str) -> Option<String> {
    let inner = word.trim().strip_prefix('\'')?.strip_suffix('\'')?;
    Some(inner.replace("'\\''", "'"))
}

/// The real wall clock in ms, past libfaketime: `date +%s%3N` without
/// `LD_PRELOAD`.
async fn real_wall_ms() -> Result<String> {
    let output = tokio::process::Command::new("date")
        .arg("+%s%3N")
        .env_remove("LD_PRELOAD")
        .output()
        .await
        .context("cannot run date")?;
    if !output.status.success() {
        bail!("date failed: {}", output.status);
    }
    Ok(String::from_utf8_lossy(&output.stdout).trim().to_string())
}
