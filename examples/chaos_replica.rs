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
//!   zone, overlap, misfire, grace, retries, `on_holder_lost` and timeout;
//!   a job with `after` (and no schedule: a pure follower) gets
//!   [`JobBuilder::after`], its `after_on` and `after_all`.
//! - **Notifications.** Each `[notify.NAME]` webhook channel (`url`,
//!   `timeout`) becomes a [`Channel`] given to
//!   [`SchedulerBuilder::channel`](cronlease::SchedulerBuilder::channel),
//!   and each job's rules (`notify`, `notify_on`, `late_after`,
//!   `expect_success_within`, `repeat_every`) the [`JobBuilder`]'s; a
//!   channel of another kind, or with headers or a secret, is refused,
//!   like an invalid config, rather than left out silently.
//! - **Handlers.** Each job's `shell` command is the probe the suite writes
//!   (`harness/config.rs`), in a fixed shape:
//!   `echo "start …" >> 'EFFECTS'; BODY; echo "end …" >> 'EFFECTS'`, BODY
//!   being `true`, `sleep SECONDS`, or `case $((CRONLEASE_TICK_MS / 1000 %
//!   N)) in A|B) STEP ;; … esac` with STEPs of those two kinds or `exit
//!   CODE`. The effects file and the body are taken from it (a command of
//!   another shape is refused, like an invalid config), so the config file
//!   stays the one source of truth. The handler does what the shell would:
//!   appends the `start` line (`start JOB TICK_MS FENCE REPLICA RUN_ID
//!   WALL_MS`, then the upstream run id for a follower's run), takes the tick's step (waits, or fails without the `end`
//!   line), appends the `end` line. Told to stop (lost lease, timeout,
//!   shutdown) it returns at once without the `end` line, as the killed
//!   shell would.
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
use cronlease::config::{self, ChannelSpec, Command, Config, EventSet, Topology};
use cronlease::schedule::{DstGap, DstRepeat};
use cronlease::{Channel, Cluster, Job, JobBuilder, RedisSettings, Run, Scheduler};
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
    let channels = channels(&config)?;
    let Some(cluster) = connect(&config, &mut signals).await? else {
        return Ok(());
    };
    let scheduler = jobs
        .into_iter()
        .fold(scheduler(&cluster, &config), |builder, job| {
            builder.job(job)
        });
    let mut scheduler = channels
        .into_iter()
        .fold(scheduler, |builder, (name, channel)| {
            builder.channel(&name, channel)
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

/// The `[notify.NAME]` channels: webhooks with a URL and a timeout.
fn channels(config: &Config) -> Result<Vec<(String, Channel)>> {
    config
        .notify
        .iter()
        .map(|(name, spec)| match spec {
            ChannelSpec::Webhook(webhook)
                if webhook.headers.is_empty()
                    && webhook.secret.is_none()
                    && webhook.secret_env.is_none() =>
            {
                let channel = Channel::webhook(&webhook.url).timeout(webhook.timeout);
                Ok((name.clone(), channel))
            }
            _ => bail!(
                "channel {name}: only a webhook with `url` and `timeout` is supported by \
                 this example"
            ),
        })
        .collect()
}

/// A job's notification rules, as the file resolved them.
fn with_notify(builder: JobBuilder, rules: &config::NotifyRules) -> JobBuilder {
    if rules.channels.is_empty() {
        return builder;
    }
    let channels: Vec<&str> = rules.channels.iter().map(String::as_str).collect();
    let mut builder = builder.notify(&channels).repeat_every(rules.repeat_every);
    if let Some(late_after) = rules.late_after {
        builder = builder.late_after(late_after);
    }
    if let Some(within) = rules.expect_success_within {
        builder = builder.expect_success_within(within);
    }
    // Only when the file chose: the default depends on the settings above.
    let default = match rules.late_after {
        Some(_) => EventSet::job_default().with(cronlease::EventKind::Late),
        None => EventSet::job_default(),
    };
    if rules.on != default {
        builder = builder.notify_on(rules.on.iter());
    }
    builder
}

/// Every job of the table, with its probe handler.
fn embedded_jobs(config: &Config) -> Result<Vec<Job>> {
    config.jobs.values().map(embedded_job).collect()
}

fn embedded_job(job: &config::Job) -> Result<Job> {
    let probe = Probe::parse(job)?;
    let mut builder = match (&job.schedule, &job.after) {
        (Some(timetable), _) => {
            let (first, more) = timetable
                .schedules()
                .split_first()
                .expect("a timetable has at least one schedule");
            let mut builder = JobBuilder::new(&job.name, first.expression())
                .timezone(timetable.timezone().name());
            for schedule in more {
                builder = builder.also_at(schedule.expression());
            }
            // Only when set: the defaults are not valid on every schedule.
            let dst = first.dst();
            if dst.gap != DstGap::default() {
                builder = builder.dst_gap(dst.gap);
            }
            if dst.repeat != DstRepeat::default() {
                builder = builder.dst_repeat(dst.repeat);
            }
            builder
        }
        // A pure follower: its runs come from its upstreams' outcomes.
        (None, Some(after)) => {
            JobBuilder::after(&job.name, after.upstreams.iter().map(String::as_str))
        }
        (None, None) => bail!("job {}: neither a schedule nor `after`", job.name),
    };
    if let Some(after) = &job.after {
        builder = builder
            .follows(after.upstreams.iter().map(String::as_str))
            .after_on(after.on)
            .join(after.join);
    }
    builder = builder
        .overlap(job.overlap)
        .misfire(job.misfire)
        .misfire_grace(job.misfire_grace)
        .retries(job.retries)
        .retry_backoff(job.retry_backoff)
        .on_holder_lost(job.on_holder_lost);
    if let Some(timeout) = job.timeout {
        builder = builder.timeout(timeout);
    }
    let builder = with_notify(builder, &job.notify);
    Ok(builder.run(move |run: Run| {
        let probe = probe.clone();
        async move { probe.run(run).await }
    }))
}

/// What a probe job does: its effects file and its body.
#[derive(Debug, Clone)]
struct Probe {
    effects: PathBuf,
    body: Body,
}

/// What a probe's body does on one tick.
#[derive(Debug, Clone, Copy)]
enum Step {
    /// `true` (no wait) or `sleep SECONDS`.
    Sleep(Duration),
    /// `exit CODE`: the shell ends there, without the `end` line.
    Exit(i32),
}

/// A probe's body: one step, or a `case` on the tick's second modulo
/// `modulus` (an arm's values, `None` for `*`).
#[derive(Debug, Clone)]
enum Body {
    Always(Step),
    ByTick {
        modulus: i64,
        arms: Vec<(Option<Vec<i64>>, Step)>,
    },
}

impl Body {
    /// `true`, `sleep SECONDS`, `exit CODE`, or `case $((CRONLEASE_TICK_MS
    /// / 1000 % N)) in A|B) STEP ;; *) STEP ;; esac`.
    fn parse(text: &str) -> Option<Body> {
        let text = text.trim();
        let Some(rest) = text.strip_prefix("case $((CRONLEASE_TICK_MS / 1000 % ") else {
            return parse_step(text).map(Body::Always);
        };
        let (modulus, rest) = rest.split_once(")) in ")?;
        let modulus = modulus.trim().parse().ok().filter(|m: &i64| *m > 0)?;
        let arms = rest
            .strip_suffix("esac")?
            .split(";;")
            .map(str::trim)
            .filter(|arm| !arm.is_empty())
            .map(|arm| {
                let (values, step) = arm.split_once(')')?;
                let values = match values.trim() {
                    "*" => None,
                    list => Some(
                        list.split('|')
                            .map(|v| v.trim().parse().ok())
                            .collect::<Option<Vec<i64>>>()?,
                    ),
                };
                Some((values, parse_step(step.trim())?))
            })
            .collect::<Option<Vec<_>>>()?;
        Some(Body::ByTick { modulus, arms })
    }

    /// The step for the tick at `tick_ms`: the first arm that matches, as
    /// the shell's `case`; none matching does nothing.
    fn step(&self, tick_ms: i64) -> Step {
        match self {
            Body::Always(step) => *step,
            Body::ByTick { modulus, arms } => {
                let value = tick_ms.div_euclid(1_000).rem_euclid(*modulus);
                arms.iter()
                    .find(|(values, _)| values.as_ref().is_none_or(|v| v.contains(&value)))
                    .map_or(Step::Sleep(Duration::ZERO), |(_, step)| *step)
            }
        }
    }
}

fn parse_step(text: &str) -> Option<Step> {
    if text == "true" {
        return Some(Step::Sleep(Duration::ZERO));
    }
    if let Some(code) = text.strip_prefix("exit ") {
        return code.trim().parse().ok().map(Step::Exit);
    }
    let seconds = text
        .strip_prefix("sleep ")?
        .trim()
        .parse::<f64>()
        .ok()
        .filter(|s| s.is_finite() && *s >= 0.0)?;
    Some(Step::Sleep(Duration::from_secs_f64(seconds)))
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
        let (body, _end) = rest.rsplit_once("; ").with_context(shape)?;
        let (_, file) = start.rsplit_once(" >> ").with_context(shape)?;
        let effects = unquote(file).with_context(shape)?;
        let body = Body::parse(body).with_context(shape)?;
        Ok(Probe {
            effects: PathBuf::from(effects),
            body,
        })
    }

    /// The `start` line, the tick's step (a wait cut short when told to
    /// stop, or an exit, both without the `end` line), the `end` line.
    async fn run(&self, mut run: Run) -> Result<()> {
        self.append(&run, "start").await?;
        let wait = match self.body.step(run.tick().as_millisecond()) {
            Step::Sleep(wait) => wait,
            Step::Exit(0) => return Ok(()),
            Step::Exit(code) => bail!("exit status {code}"),
        };
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            reason = run.stopped() => {
                // As the killed shell: no `end` line.
                bail!("stopped: {reason:?}");
            }
        }
        self.append(&run, "end").await
    }

    /// Appends `WHAT JOB TICK_MS FENCE REPLICA RUN_ID WALL_MS`, and for a
    /// follower's run ` UPSTREAM_RUN_ID` (`$CRONLEASE_UPSTREAM_RUN_ID`: the
    /// upstream runs' ids, comma-separated), in one write.
    async fn append(&self, run: &Run, what: &str) -> Result<()> {
        let cause = run.upstream().map_or_else(String::new, |upstream| {
            let ids: Vec<&str> = upstream.runs().iter().map(|r| r.run_id()).collect();
            format!(" {}", ids.join(","))
        });
        let line = format!(
            "{what} {} {} {} {} {} {}{cause}\n",
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
