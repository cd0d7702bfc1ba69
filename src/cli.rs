//! The command line: clap definitions and one function per subcommand.
//!
//! Every subcommand returns an [`ExitCode`]; errors are printed here as one
//! message (with its cause chain) and never as a panic or a backtrace.
//! Exit status 2 means the input was invalid (config, flags), 1 a runtime
//! failure.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use chrono::{DateTime, SecondsFormat, Utc};
use clap::{Args, Parser, Subcommand};

use tokio_util::sync::CancellationToken;

use crate::config::Config;

/// The default config path, as installed by the package.
pub const DEFAULT_CONFIG: &str = "/etc/cronlease/jobs.toml";

/// Exit status for invalid input: a bad config file or bad flags.
pub const EXIT_INVALID_INPUT: u8 = 2;

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
}

#[derive(Debug, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub config: ConfigArg,
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
    /// Print JSON: {"jobs":[{"name","schedule","timezone","next":[RFC 3339 UTC, …]}]}.
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

/// Runs the parsed command line to completion.
pub fn run(cli: Cli) -> ExitCode {
    match cli.command {
        Command::Check(args) => check(&args),
        Command::Run(args) => run_daemon(&args),
    }
}

/// Exit status when Redis is set up to lose our keys (EX_CONFIG).
pub const EXIT_REDIS_CONFIG: u8 = 78;

/// `cronlease run`.
fn run_daemon(args: &RunArgs) -> ExitCode {
    init_logging();
    let config = match Config::load(&args.config.config) {
        Ok(config) => config,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(EXIT_INVALID_INPUT);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(async {
        let shutdown = CancellationToken::new();
        let signals = match watch_signals(shutdown.clone()) {
            Ok(signals) => signals,
            Err(e) => {
                eprintln!("error: cannot install signal handlers: {e}");
                return ExitCode::FAILURE;
            }
        };
        let result = crate::daemon::run(config, shutdown.clone()).await;
        shutdown.cancel();
        let _ = signals.await;
        match result {
            Ok(()) => ExitCode::SUCCESS,
            Err(e @ crate::daemon::DaemonError::Eviction { .. }) => {
                tracing::error!("refusing to start: {e}");
                ExitCode::from(EXIT_REDIS_CONFIG)
            }
            Err(e) => {
                tracing::error!("{e:#}");
                ExitCode::FAILURE
            }
        }
    })
}

/// Cancels `shutdown` on SIGTERM or SIGINT; the task ends with it.
fn watch_signals(shutdown: CancellationToken) -> std::io::Result<tokio::task::JoinHandle<()>> {
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
                _ = hup.recv() => {
                    tracing::warn!("SIGHUP received: reloading the job table is not supported by this version; restart the service to apply changes");
                }
            }
        }
    }))
}

/// Logs to stderr, filtered by `RUST_LOG` (default `info`).
fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
}

/// `cronlease check`.
fn check(args: &CheckArgs) -> ExitCode {
    let from = args.from.unwrap_or_else(Utc::now);
    let config = match Config::load(&args.config.config) {
        Ok(config) => config,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(EXIT_INVALID_INPUT);
        }
    };
    let count = usize::from(args.count);
    let out = if args.json {
        check_json(&config, from, count)
    } else {
        check_text(&config, from, count)
    };
    match std::io::stdout().lock().write_all(out.as_bytes()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: cannot write to stdout: {e}");
            ExitCode::FAILURE
        }
    }
}

fn rfc3339_utc(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Secs, true)
}

fn check_json(config: &Config, from: DateTime<Utc>, count: usize) -> String {
    let jobs: Vec<serde_json::Value> = config
        .jobs
        .values()
        .map(|job| {
            let next: Vec<String> = job
                .schedule
                .upcoming(from, count)
                .into_iter()
                .map(rfc3339_utc)
                .collect();
            serde_json::json!({
                "name": job.name,
                "schedule": job.schedule.expression(),
                "timezone": job.schedule.timezone().name(),
                "next": next,
            })
        })
        .collect();
    let mut text = serde_json::json!({ "jobs": jobs }).to_string();
    text.push('\n');
    text
}

fn check_text(config: &Config, from: DateTime<Utc>, count: usize) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let n = config.jobs.len();
    let _ = writeln!(
        out,
        "{}: valid, {n} job{}; next fire times after {}",
        config.source.display(),
        if n == 1 { "" } else { "s" },
        rfc3339_utc(from)
    );
    for job in config.jobs.values() {
        let tz = job.schedule.timezone();
        let _ = writeln!(
            out,
            "\n{}  {:?}  ({})",
            job.name,
            job.schedule.expression(),
            tz.name()
        );
        for tick in job.schedule.upcoming(from, count) {
            let local = tick.with_timezone(&tz);
            let _ = writeln!(
                out,
                "  {}  =  {}",
                local.format("%Y-%m-%d %H:%M:%S %:z %a"),
                rfc3339_utc(tick)
            );
        }
    }
    out
}
