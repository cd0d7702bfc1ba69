//! `cronlease pause` and `cronlease resume`: one job, or the whole
//! cluster (`--all`, which waits for the replicas to confirm).

use std::time::Duration;

use clap::Args;

use super::{ConnectArgs, Failure, operator_command, parse_cli_duration};
use crate::exit::Exit;
use crate::operator::{self, PauseOptions, Until};

#[derive(Debug, Args)]
pub struct PauseArgs {
    #[command(flatten)]
    pub connect: ConnectArgs,
    /// The job.
    #[arg(required_unless_present = "all", conflicts_with = "all")]
    pub job: Option<String>,
    /// Every job of the cluster (the maintenance switch).
    #[arg(long)]
    pub all: bool,
    /// When the pause ends by itself: an RFC 3339 time
    /// (2026-11-26T22:00:00Z) or a duration from now (30m, 2h); by Redis
    /// time, and after it.
    #[arg(long, value_name = "T", value_parser = parse_until)]
    pub until: Option<Until>,
    /// Why, for `status`, `explain` and the dashboard: one line, at most
    /// 500 characters.
    #[arg(long, value_name = "TEXT", value_parser = parse_reason)]
    pub reason: Option<String>,
    /// With --all: how long to wait for every live replica to confirm it
    /// holds the pause.
    #[arg(long, value_name = "D", default_value = "15s", value_parser = parse_cli_duration)]
    pub wait: Duration,
}

#[derive(Debug, Args)]
pub struct ResumeArgs {
    #[command(flatten)]
    pub connect: ConnectArgs,
    /// The job.
    #[arg(required_unless_present = "all", conflicts_with = "all")]
    pub job: Option<String>,
    /// End the cluster's pause (`pause --all`).
    #[arg(long)]
    pub all: bool,
    /// With --all: how long to wait for every live replica to confirm.
    #[arg(long, value_name = "D", default_value = "15s", value_parser = parse_cli_duration)]
    pub wait: Duration,
}

fn parse_until(text: &str) -> Result<Until, String> {
    Until::parse(text)
}

fn parse_reason(text: &str) -> Result<String, String> {
    operator::check_reason(text).map(|()| text.to_string())
}

/// `cronlease pause`.
pub(super) fn pause(args: &PauseArgs) -> Exit {
    operator_command(&args.connect, |target| async move {
        let who = operator::operator_identity();
        let options = PauseOptions {
            until: args.until,
            reason: args.reason.clone().unwrap_or_default(),
        };
        let why = if options.reason.is_empty() {
            String::new()
        } else {
            format!(": {}", options.reason)
        };
        let Some(job) = &args.job else {
            let change = operator::pause_all(&target.store, &who, &options, args.wait).await?;
            let said = format!(
                "every job paused by {who}{}{why}\n",
                until_text(change.until_ms)
            );
            return cluster_confirmed(said, &change, args.wait);
        };
        operator::require_job(&target.store, target.config.as_ref(), job).await?;
        let paused = operator::pause(&target.store, job, &who, &options).await?;
        Ok(format!(
            "{job} paused by {who}{}{why}\n",
            until_text(paused.until_ms)
        ))
    })
}

/// `cronlease resume`.
pub(super) fn resume(args: &ResumeArgs) -> Exit {
    operator_command(&args.connect, |target| async move {
        let who = operator::operator_identity();
        let Some(job) = &args.job else {
            let change = operator::resume_all(&target.store, &who, args.wait).await?;
            let said =
                format!("the cluster resumed by {who} (jobs paused on their own stay paused)\n");
            return cluster_confirmed(said, &change, args.wait);
        };
        operator::require_job(&target.store, target.config.as_ref(), job).await?;
        let at_ms = operator::resume(&target.store, job, &who).await?;
        let held = target
            .store
            .cluster_pause()
            .await?
            .is_some_and(|p| p.holds(at_ms));
        Ok(if held {
            format!(
                "{job} resumed by {who} (the cluster's pause still holds every job: cronlease resume --all)\n"
            )
        } else {
            format!("{job} resumed by {who}\n")
        })
    })
}

/// " until <RFC 3339>", or nothing for a pause until resumed.
fn until_text(until_ms: Option<i64>) -> String {
    match until_ms.and_then(chrono::DateTime::from_timestamp_millis) {
        Some(at) => format!(
            " until {}",
            at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
        ),
        None => String::new(),
    }
}

/// The cluster's change `said`, and which live replicas confirmed it; an
/// error (exit 1) naming those that did not within `wait`.
fn cluster_confirmed(
    said: String,
    change: &operator::ClusterChange,
    wait: Duration,
) -> Result<String, Failure> {
    if change.unconfirmed.is_empty() && change.confirmed.is_empty() {
        return Ok(format!(
            "{said}no live replica to confirm it: each reads it before its first claim\n"
        ));
    }
    if change.unconfirmed.is_empty() {
        return Ok(format!(
            "{said}confirmed by every live replica ({}): {}\n",
            change.confirmed.len(),
            change.confirmed.join(", ")
        ));
    }
    print!("{said}");
    Err(Failure::Runtime(format!(
        "not confirmed within {} by the live replica(s) {} (they may start ticks until they read it at their next heartbeat); confirmed by: {}",
        humantime::format_duration(wait),
        change.unconfirmed.join(", "),
        if change.confirmed.is_empty() {
            "none".to_string()
        } else {
            change.confirmed.join(", ")
        }
    )))
}
