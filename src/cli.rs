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
    }
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
