//! The command line: clap definitions and one function per subcommand.
//! The man pages and shell completions are generated from the same
//! definitions (`generate.rs`).
//!
//! Every subcommand returns an [`Exit`]; errors are printed here as one
//! message (with its cause chain) and never as a panic or a backtrace.

use std::io::Write;
use std::path::PathBuf;

use chrono::{DateTime, Utc};
use clap::{Args, Parser, Subcommand};

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::config::{Config, RedisConfig};
use crate::exit::Exit;
use crate::operator::{self, OperatorError};
use crate::outcome::Status;
use crate::store::{Store, StoreError};
use crate::task::Tasks;
pub use lock::LockArgs;
pub use pause::{PauseArgs, ResumeArgs};

mod backfill;
mod check;
mod drain;
mod generate;
mod kill;
mod lock;
mod logs;
mod notify;
mod pause;

pub use generate::CompletionShell;

/// The default config path, as installed by the package.
pub const DEFAULT_CONFIG: &str = "/etc/cronlease/jobs.toml";

/// A replicated cron daemon: every tick of every job runs exactly once across
/// all replicas that share one Redis.
#[derive(Debug, Parser)]
#[command(name = "cronlease", version, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Validate a job table and print the next fire times of each job.
    ///
    /// Exits 0 when the file is valid and 2, listing every problem with its
    /// file, line, job and field, when it is not.
    Check(CheckArgs),
    /// Run a replica: claim and run the job table's ticks until SIGTERM.
    ///
    /// Exits 0 after a clean shutdown (SIGTERM or SIGINT: no more claims,
    /// runs get `shutdown_grace`, then are interrupted), 2 for an invalid
    /// config, 78 when Redis is configured to evict keys, 1 for other
    /// failures.
    Run(RunArgs),
    /// Show replicas (alive or dead, runs in flight) and, per job: schedule,
    /// next tick, paused, the run in flight, the last outcome and config
    /// drift between replicas.
    Status(StatusArgs),
    /// Show a job's outcomes, newest first.
    History(HistoryArgs),
    /// Say what happened to one tick of a job and why: who ran it and how
    /// it ended, or why it did not run (not a tick, paused, misfire,
    /// overlap, no live replica, Redis unreachable, config drift, …).
    Explain(ExplainArgs),
    /// Ask the cluster to run a job once now (exactly one live replica runs
    /// it, under the job's overlap policy; the schedule is not affected).
    ///
    /// Prints the run id. With --wait, waits for the outcome and exits 0 on
    /// `ok`, 1 otherwise.
    Trigger(TriggerArgs),
    /// Stop a job's runs in flight, or one (RUN_ID), on whichever replica
    /// holds them: SIGTERM, SIGKILL after kill_grace; recorded `killed`
    /// with who asked, never retried nor rerun. Exits 1 when none is in
    /// flight.
    Kill(kill::KillArgs),
    /// Print a run's output while it runs, from any host: the job's newest
    /// run in flight, or --run RUN_ID; --follow prints lines as they come
    /// until the run ends.
    ///
    /// What a run prints goes to a capped stream in Redis while it runs
    /// (the lines the log gets, at most 1,000 of 2 KiB each) and is kept a
    /// minute after it ends; `history --output` keeps the tail for good.
    Logs(logs::LogsArgs),
    /// Run each past tick of a job's schedule in a range once: ticks that
    /// ran are skipped and listed, the others queued for the replicas.
    ///
    /// Follows the outcomes; exits 0 when every queued tick ran `ok`, 1
    /// otherwise (Ctrl-C stops watching, not the backfill), 2 for bad input.
    Backfill(backfill::BackfillArgs),
    /// Pause a job on every replica, or every job (--all): its ticks are
    /// skipped, not caught up.
    ///
    /// Until resumed, or until --until (an RFC 3339 time or a duration from
    /// now, by Redis time): from then on the ticks run again, and the end
    /// is recorded once in the job's actions. --reason shows in `status`,
    /// `explain` and the dashboard. --all is the cluster's maintenance
    /// switch: every job of every replica (embedded schedulers' too, and
    /// jobs added later) until `resume --all` or its --until; it returns
    /// once every live replica confirmed it holds the pause, and exits 1
    /// naming those that did not within --wait.
    Pause(PauseArgs),
    /// Resume a paused job from its next tick, or end the cluster's pause
    /// (--all; jobs paused on their own stay paused).
    Resume(ResumeArgs),
    /// Take a replica out of the rendezvous for a deploy: it claims nothing
    /// and its runs go on, across its restarts, until `undrain`.
    Drain(drain::DrainArgs),
    /// Put a drained replica back in the rendezvous: it claims again.
    Undrain(drain::UndrainArgs),
    /// Clear what no replica writes from a job's state in Redis (a
    /// high-water mark later than any claim could set, a fence past 2^53,
    /// quarantined runs in flight) once `status` shows it needs repair.
    ///
    /// The replicas re-seed what was cleared from what their own claims
    /// showed. Recorded in the job's actions.
    Repair(JobArgs),
    /// Run a command under a cluster-wide lock (the flock(1) of a cluster).
    ///
    /// The command gets CRONLEASE_FENCE (growing with every acquisition),
    /// CRONLEASE_LOCK and CRONLEASE_RUN_ID. Exits 75 when the lock is not
    /// acquired (at once, or after --wait) or its lease is lost (the command
    /// is then killed); otherwise with the command's status.
    Lock(LockArgs),
    /// Notification channels (`[notify.<name>]`): `notify test CHANNEL`
    /// sends a test event through one and prints the receiver's answer.
    Notify(NotifyArgs),
    /// Print the completion script of a shell (bash, zsh or fish).
    ///
    /// The Debian package installs all three. By hand, for example:
    /// `cronlease completions bash > ~/.local/share/bash-completion/completions/cronlease`,
    /// `cronlease completions fish > ~/.config/fish/completions/cronlease.fish`.
    Completions(CompletionsArgs),
    /// Write the man pages into DIR: cronlease.1 and one page per
    /// subcommand (cronlease-run.1, …). What scripts/package installs.
    #[command(hide = true)]
    GenerateMan(GenerateManArgs),
}

#[derive(Debug, Args)]
pub struct NotifyArgs {
    #[command(subcommand)]
    pub command: NotifyCommand,
}

#[derive(Debug, Subcommand)]
pub enum NotifyCommand {
    /// Send a test event (kind `test`, a fresh idempotency key) through a
    /// channel and print the receiver's answer.
    ///
    /// Exits 0 when the receiver took it, 1 when it did not (the error
    /// says whether the delivery would retry), 2 for an invalid config or
    /// a channel the config does not define (the defined ones listed).
    Test(NotifyTestArgs),
}

#[derive(Debug, Args)]
pub struct NotifyTestArgs {
    /// The channel: the name of a `[notify.<name>]` table.
    pub channel: String,
    #[command(flatten)]
    pub config: ConfigArg,
}

#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell.
    #[arg(value_enum)]
    pub shell: CompletionShell,
}

#[derive(Debug, Args)]
pub struct GenerateManArgs {
    /// The directory to write the pages into (created if missing).
    pub dir: PathBuf,
}

/// How to reach Redis: a config file, or a URL and prefix.
#[derive(Debug, Args)]
pub struct ConnectArgs {
    /// The job table (TOML): its [redis] section and its jobs. Default
    /// /etc/cronlease/jobs.toml unless --redis-url is given.
    #[arg(long, short = 'c', value_name = "FILE", env = "CRONLEASE_CONFIG")]
    pub config: Option<PathBuf>,
    /// Redis URL to use instead of a config file's (redis://, rediss://).
    #[arg(
        long,
        value_name = "URL",
        env = "CRONLEASE_REDIS_URL",
        hide_env_values = true
    )]
    pub redis_url: Option<String>,
    /// Key prefix (default: the config's, else "cronlease").
    #[arg(long, value_name = "P")]
    pub prefix: Option<String>,
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    #[command(flatten)]
    pub connect: ConnectArgs,
    /// Also show who holds this cluster lock (`cronlease lock`, or the
    /// library's), its fence and time left; repeatable.
    #[arg(long = "lock", value_name = "NAME")]
    pub locks: Vec<String>,
    /// Print JSON (schema in the guide, "Operating").
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct HistoryArgs {
    #[command(flatten)]
    pub connect: ConnectArgs,
    /// The job.
    pub job: String,
    /// How many outcomes.
    #[arg(short = 'n', long = "count", default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub count: u32,
    /// Print JSON (schema in the guide, "Operating").
    #[arg(long)]
    pub json: bool,
    /// Include each run's recorded output tail (its control characters
    /// escaped, unless --raw).
    #[arg(long)]
    pub output: bool,
    /// Print output tails as the jobs wrote them, control characters and
    /// terminal escape sequences included.
    #[arg(long, requires = "output")]
    pub raw: bool,
}

#[derive(Debug, Args)]
pub struct ExplainArgs {
    #[command(flatten)]
    pub connect: ConnectArgs,
    /// The job.
    pub job: String,
    /// The tick (RFC 3339, e.g. 2026-03-29T02:00:00Z, or ms since the
    /// epoch); default: the latest tick of the schedule that is due.
    #[arg(long, value_name = "T", value_parser = operator::parse_tick)]
    pub tick: Option<i64>,
    /// Print JSON (schema in the guide, "Why didn't my job run?").
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct TriggerArgs {
    #[command(flatten)]
    pub connect: ConnectArgs,
    /// The job.
    pub job: String,
    /// A value for one of the job's parameters (`params`), checked
    /// against the job table before anything is queued; repeatable. The
    /// others take their defaults.
    #[arg(long = "param", value_name = "NAME=VALUE", value_parser = operator::parse_param)]
    pub params: Vec<(String, String)>,
    /// The W3C trace context the run continues (`00-<trace id>-<span
    /// id>-<flags>`): its span becomes a child of that span. Defaults to
    /// `$TRACEPARENT` (a trigger from inside a traced run), which is left
    /// out, with a warning, when it is not valid.
    #[arg(long, value_name = "TRACEPARENT", value_parser = crate::trace::parse_arg)]
    pub traceparent: Option<crate::trace::TraceParent>,
    /// Wait for the outcome; exit 0 on `ok`, 1 otherwise.
    #[arg(long)]
    pub wait: bool,
    /// With --wait: give up (exit 1) after this long.
    #[arg(long, value_name = "D", default_value = "1h", value_parser = parse_cli_duration, requires = "wait")]
    pub timeout: Duration,
}

#[derive(Debug, Args)]
pub struct JobArgs {
    #[command(flatten)]
    pub connect: ConnectArgs,
    /// The job.
    pub job: String,
}

pub(crate) fn parse_cli_duration(text: &str) -> Result<Duration, String> {
    crate::config::parse_duration(text, Duration::from_secs(7 * 24 * 3600))
}

fn parse_lease(text: &str) -> Result<Duration, String> {
    let lease = crate::config::parse_duration(text, Duration::from_secs(3600))?;
    if lease < Duration::from_secs(1) {
        return Err("a lease must be at least 1s".to_string());
    }
    Ok(lease)
}

fn parse_name(text: &str) -> Result<String, String> {
    if crate::config::is_name(text, 128) {
        Ok(text.to_string())
    } else {
        Err("expected 1 to 128 characters from A-Z a-z 0-9 _ . -".to_string())
    }
}

#[derive(Debug, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub config: ConfigArg,
    /// This replica's id, overriding `[daemon] replica_id` (the systemd
    /// template unit passes its instance name).
    #[arg(long, value_name = "ID", value_parser = parse_name)]
    pub replica_id: Option<String>,
}

/// Where the job table is.
#[derive(Debug, Args)]
pub struct ConfigArg {
    /// The job table (TOML).
    #[arg(long, short = 'c', value_name = "FILE", env = "CRONLEASE_CONFIG", default_value = DEFAULT_CONFIG)]
    pub config: PathBuf,
}

#[derive(Debug, Args)]
pub struct CheckArgs {
    #[command(flatten)]
    pub config: ConfigArg,
    /// Count fire times from this instant (RFC 3339, e.g. 2026-03-29T00:00:00Z)
    /// instead of now.
    #[arg(long, value_name = "RFC3339", value_parser = parse_rfc3339)]
    pub from: Option<DateTime<Utc>>,
    /// How many fire times to print per job.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u16).range(1..=1000))]
    pub count: u16,
    /// Print JSON: one object with `jobs` (each with `name`, `schedule` and
    /// `resolved` (several expressions joined by ` | `), `schedules` (each
    /// `expression`, `resolved`, `timing`), `timezone`, `timing`, `dst_gap`,
    /// `dst_repeat`, `active_from`, `active_until`, `max_runs`, `next`: RFC
    /// 3339 UTC instants, `ended`, and `notify`: its `channels` and events
    /// `on`), `channels` (each `name`, `kind`, `target`), `replica_dead` (the
    /// channels told of a dead replica) and `warnings`.
    #[arg(long)]
    pub json: bool,
}

fn parse_rfc3339(text: &str) -> Result<DateTime<Utc>, String> {
    DateTime::parse_from_rfc3339(text)
        .map(|t| t.with_timezone(&Utc))
        .map_err(|e| {
            format!(
                "{e}: expected RFC 3339, e.g. 2026-03-29T00:00:00Z or 2026-03-29T02:00:00+02:00"
            )
        })
}

/// Runs the parsed command line to completion; jobs run their commands.
pub fn run(cli: Cli) -> Exit {
    run_with(cli, Tasks::processes())
}

/// Runs the parsed command line to completion; `cronlease run` runs each
/// job's task as `tasks` says (a program that embeds the daemon registers
/// its own tasks here).
pub fn run_with(cli: Cli, tasks: Tasks) -> Exit {
    match cli.command {
        Command::Check(args) => check::check(&args),
        Command::Run(args) => run_daemon(&args, tasks),
        Command::Status(args) => operator_command(&args.connect, |target| async move {
            let report = operator::status(
                &target.store,
                target.config.as_ref().map(|c| &c.jobs),
                &target.prefix,
                operator::Locks::Named(&args.locks),
            )
            .await?;
            Ok(if args.json {
                json_line(&report)
            } else {
                operator::render_status(&report, operator::use_colour())
            })
        }),
        Command::History(args) => operator_command(&args.connect, |target| async move {
            operator::require_job(&target.store, target.config.as_ref(), &args.job).await?;
            let output = if args.output {
                operator::OutputTail::Include
            } else {
                operator::OutputTail::Omit
            };
            let report =
                operator::history(&target.store, &args.job, args.count as usize, output).await?;
            Ok(if args.json {
                json_line(&report)
            } else {
                let text = if args.raw {
                    operator::OutputText::Raw
                } else {
                    operator::OutputText::Escaped
                };
                operator::render_history(&report, operator::use_colour(), text)
            })
        }),
        Command::Explain(args) => explain(&args),
        Command::Trigger(args) => trigger(&args),
        Command::Backfill(args) => backfill::backfill(&args),
        Command::Pause(args) => pause::pause(&args),
        Command::Resume(args) => pause::resume(&args),
        Command::Drain(args) => drain::drain(&args),
        Command::Undrain(args) => drain::undrain(&args),
        Command::Repair(args) => repair(&args),
        Command::Kill(args) => kill::kill(&args),
        Command::Logs(args) => logs::logs(&args),
        Command::Lock(args) => lock::lock(args),
        Command::Notify(args) => match &args.command {
            NotifyCommand::Test(test) => notify::test(test),
        },
        Command::Completions(args) => generate::print_completions(args.shell),
        Command::GenerateMan(args) => generate::man_pages(&args.dir),
    }
}

/// A connected operator command's world.
struct Target {
    store: Store,
    config: Option<Config>,
    prefix: String,
}

/// Why an operator command failed, and so its exit status.
enum Failure {
    /// Bad input: exit 2.
    Invalid(String),
    /// Redis or another runtime failure: exit 1.
    Runtime(String),
    /// Already reported; exit with this status.
    Exit(Exit),
}

impl From<OperatorError> for Failure {
    fn from(e: OperatorError) -> Failure {
        match e {
            OperatorError::UnknownJob(_)
            | OperatorError::Params { .. }
            | OperatorError::BadPause(_)
            | OperatorError::BadReplica(_)
            | OperatorError::Broadcast(_)
            | OperatorError::ParamsWithoutTable => Failure::Invalid(e.to_string()),
            OperatorError::Store(e) => e.into(),
            OperatorError::Paused(_)
            | OperatorError::ClusterPaused
            | OperatorError::NotInFlight(_)
            | OperatorError::Unreadable { .. } => Failure::Runtime(e.to_string()),
        }
    }
}

impl From<StoreError> for Failure {
    fn from(e: StoreError) -> Failure {
        match e {
            // The deployment cannot do this at all: like bad input.
            StoreError::QuorumUnsupported { .. } => Failure::Invalid(e.to_string()),
            _ => Failure::Runtime(e.to_string()),
        }
    }
}

fn json_line(value: &impl serde::Serialize) -> String {
    let mut text =
        serde_json::to_string(value).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"));
    text.push('\n');
    text
}

/// Resolves where Redis is: `--redis-url` (with `--prefix`), else the config
/// file's `[redis]`. The config is loaded when given, or when no URL is.
fn resolve(connect: &ConnectArgs) -> Result<(RedisConfig, Option<Config>), Failure> {
    let config_path = match (&connect.config, &connect.redis_url) {
        (Some(path), _) => Some(path.clone()),
        (None, None) => Some(PathBuf::from(DEFAULT_CONFIG)),
        (None, Some(_)) => None,
    };
    let config = match config_path {
        Some(path) => {
            Some(Config::load_without_secrets(&path).map_err(|e| Failure::Invalid(e.to_string()))?)
        }
        None => None,
    };
    let mut redis = match (&connect.redis_url, &config) {
        (Some(url), _) => {
            if redis::parse_redis_url(url).is_none() {
                return Err(Failure::Invalid(format!(
                    "invalid --redis-url {:?}: expected redis://host:port/db or rediss://…",
                    crate::config::redact_url(url)
                )));
            }
            RedisConfig::single(
                url.clone(),
                config
                    .as_ref()
                    .map_or(crate::config::DEFAULT_KEY_PREFIX.to_string(), |c| {
                        c.redis.key_prefix.clone()
                    }),
            )
        }
        (None, Some(config)) => config.redis.clone(),
        (None, None) => unreachable!("a config is loaded whenever no URL is given"),
    };
    if let Some(prefix) = &connect.prefix {
        redis.key_prefix = prefix.clone();
    }
    Ok((redis, config))
}

/// Runs an operator command on a small runtime: connect, call `body`, print
/// what it returns; errors are one line on stderr.
fn operator_command<F, Fut>(connect: &ConnectArgs, body: F) -> Exit
where
    F: FnOnce(Target) -> Fut,
    Fut: std::future::Future<Output = Result<String, Failure>>,
{
    crate::logging::init("warn", crate::config::LogFormat::Text);
    let result = resolve(connect).and_then(|(redis, config)| {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| Failure::Runtime(format!("cannot start the async runtime: {e}")))?;
        runtime.block_on(async {
            let store = Store::connect(&redis).await?;
            let prefix = redis.key_prefix.clone();
            body(Target {
                store,
                config,
                prefix,
            })
            .await
        })
    });
    match result {
        Ok(out) => match std::io::stdout().lock().write_all(out.as_bytes()) {
            Ok(()) => Exit::Success,
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Exit::Success,
            Err(e) => {
                eprintln!("error: cannot write to stdout: {e}");
                Exit::Failure
            }
        },
        Err(Failure::Invalid(message)) => {
            eprintln!("error: {message}");
            Exit::InvalidInput
        }
        Err(Failure::Runtime(message)) => {
            eprintln!("error: {message}");
            Exit::Failure
        }
        Err(Failure::Exit(code)) => code,
    }
}

/// `cronlease explain`.
fn explain(args: &ExplainArgs) -> Exit {
    operator_command(&args.connect, |target| async move {
        let jobs = target.config.as_ref().map(|c| &c.jobs);
        let explanation = operator::explain(&target.store, jobs, &args.job, args.tick)
            .await
            .map_err(|e| match e {
                operator::ExplainError::Operator(e) => Failure::from(e),
                e => Failure::Invalid(e.to_string()),
            })?;
        Ok(if args.json {
            json_line(&explanation)
        } else {
            operator::render_explanation(&explanation)
        })
    })
}

/// `cronlease trigger`.
fn trigger(args: &TriggerArgs) -> Exit {
    operator_command(&args.connect, |target| async move {
        operator::require_job(&target.store, target.config.as_ref(), &args.job).await?;
        let definition = target.config.as_ref().and_then(|c| c.jobs.get(&args.job));
        operator::check_params(definition, &args.job, &args.params)?;
        let who = operator::operator_identity();
        let run_id = operator::trigger(
            &target.store,
            &args.job,
            &who,
            &args.params,
            crate::trace::given_or_inherited(args.traceparent.as_ref()).as_ref(),
        )
        .await?;
        println!("{run_id}");
        if !args.wait {
            return Ok(String::new());
        }
        let poll = Duration::from_millis(200);
        match operator::wait_for_outcome(&target.store, &args.job, &run_id, args.timeout, poll)
            .await?
        {
            Some(outcome) => {
                println!(
                    "{} {} on {} (fence {})",
                    args.job, outcome.status, outcome.replica, outcome.fence
                );
                if outcome.status == Status::Ok {
                    Ok(String::new())
                } else {
                    Err(Failure::Exit(Exit::Failure))
                }
            }
            None => {
                eprintln!(
                    "error: no outcome for run {run_id} within {}",
                    humantime::format_duration(args.timeout)
                );
                Err(Failure::Exit(Exit::Failure))
            }
        }
    })
}

/// `cronlease repair`.
fn repair(args: &JobArgs) -> Exit {
    operator_command(&args.connect, |target| async move {
        operator::require_job(&target.store, target.config.as_ref(), &args.job).await?;
        let who = operator::operator_identity();
        let cleared = operator::repair(&target.store, &args.job, &who).await?;
        Ok(if cleared.is_empty() {
            format!("{}: nothing to repair\n", args.job)
        } else {
            format!(
                "{} repaired by {who}: cleared {}\n",
                args.job,
                cleared.join(", ")
            )
        })
    })
}

fn parse_env_pattern(text: &str) -> Result<crate::config::EnvPattern, String> {
    crate::config::EnvPattern::parse(text).ok_or_else(|| {
        format!("{text:?} is not a variable name: expected letters, digits and _, optionally ending in *")
    })
}

/// `cronlease run`.
fn run_daemon(args: &RunArgs, tasks: Tasks) -> Exit {
    let mut config = match Config::load(&args.config.config) {
        Ok(config) => config,
        Err(e) => {
            eprintln!("error: {e}");
            return Exit::InvalidInput;
        }
    };
    config.replica_id_flag = args.replica_id.clone();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return Exit::Failure;
        }
    };
    // The exporter's gRPC channel is made on the runtime.
    let exporter = match runtime.block_on(async {
        crate::logging::init_traced(
            "info",
            config.daemon.log_format,
            config.daemon.telemetry.as_ref(),
            tokio::runtime::Handle::current(),
        )
    }) {
        Ok(exporter) => exporter,
        Err(e) => {
            eprintln!("error: {e}");
            return Exit::InvalidInput;
        }
    };
    crate::runner::raise_open_files_limit();
    for warning in config.warnings(crate::clock::local_now_utc()) {
        tracing::warn!("{warning}");
    }
    let exit = serve_daemon(&runtime, config, tasks);
    // The one shutdown path's last step: the spans still queued exported,
    // within [daemon.telemetry] timeout (the runtime still sends them).
    if let Some(exporter) = exporter {
        exporter.shutdown();
    }
    exit
}

/// `cronlease run` once its log is set up: the replica until shutdown.
fn serve_daemon(runtime: &tokio::runtime::Runtime, config: Config, tasks: Tasks) -> Exit {
    runtime.block_on(async {
        let shutdown = CancellationToken::new();
        let (reload_tx, reload_rx) = tokio::sync::mpsc::unbounded_channel();
        let signals = match watch_signals(shutdown.clone(), Some(reload_tx)) {
            Ok(signals) => signals,
            Err(e) => {
                eprintln!("error: cannot install signal handlers: {e}");
                return Exit::Failure;
            }
        };
        // As a container's PID 1, the replica is handed every orphan of
        // its namespace and reaps those its runner did not start.
        let reaping = CancellationToken::new();
        let reaper = crate::runner::orphans::is_init().then(|| {
            tracing::info!("running as PID 1: orphaned processes are reaped");
            tokio::spawn(crate::runner::orphans::reap_orphans(reaping.clone()))
        });
        let Some(store) = crate::daemon::connect(&config.redis, &shutdown).await else {
            reaping.cancel();
            if let Some(reaper) = reaper {
                let _ = reaper.await;
            }
            let _ = signals.await;
            return Exit::Success;
        };
        let world = crate::daemon::World {
            store,
            clock: crate::clock::RedisClock::new(),
            tasks,
            ready: None,
        };
        let result = crate::daemon::run(config, world, shutdown.clone(), reload_rx).await;
        shutdown.cancel();
        reaping.cancel();
        if let Some(reaper) = reaper {
            let _ = reaper.await;
        }
        let _ = signals.await;
        daemon_exit(result)
    })
}

/// The exit status of a replica's run, its error logged.
fn daemon_exit(result: Result<(), crate::daemon::DaemonError>) -> Exit {
    match result {
        Ok(()) => Exit::Success,
        Err(e @ crate::daemon::DaemonError::Eviction { .. }) => {
            tracing::error!("refusing to start: {e}");
            Exit::RedisConfig
        }
        Err(e @ crate::daemon::DaemonError::Limits(_)) => {
            tracing::error!("refusing to start: {e}");
            Exit::InvalidInput
        }
        #[cfg(feature = "dashboard")]
        Err(e @ crate::daemon::DaemonError::DashboardToken(_)) => {
            tracing::error!("refusing to start: {e}");
            Exit::InvalidInput
        }
        Err(e) => {
            tracing::error!("{e:#}");
            Exit::Failure
        }
    }
}

/// Cancels `shutdown` on SIGTERM or SIGINT, and asks for a reload on
/// SIGHUP (ignored without `reload`); the task ends with `shutdown`.
fn watch_signals(
    shutdown: CancellationToken,
    reload: Option<tokio::sync::mpsc::UnboundedSender<crate::daemon::Reload>>,
) -> std::io::Result<tokio::task::JoinHandle<()>> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let mut hup = signal(SignalKind::hangup())?;
    Ok(tokio::spawn(async move {
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                _ = term.recv() => {
                    tracing::info!("SIGTERM received");
                    shutdown.cancel();
                }
                _ = int.recv() => {
                    tracing::info!("SIGINT received");
                    shutdown.cancel();
                }
                _ = hup.recv() => match &reload {
                    Some(reload) => {
                        let _ = reload.send(crate::daemon::Reload::File);
                    }
                    None => tracing::debug!("SIGHUP ignored"),
                },
            }
        }
    }))
}
