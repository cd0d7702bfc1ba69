//! `cronlease backfill`: its arguments, the plan as text, and the watch
//! of the queued ticks' outcomes.

use std::fmt::Write as _;
use std::time::Duration;

use clap::Args;
use tokio::signal::unix::{SignalKind, signal};

use super::{ConnectArgs, Failure, Target, operator_command, parse_cli_duration};
use crate::exit::Exit;
use crate::inert::escape;
use crate::operator::{
    self, BackfillRefusal, BackfillReport, BackfillRequest, HistoryEntry, PlanMode,
};
use crate::outcome::Status;

/// How many ticks to run the text plan lists (`--json` lists them all).
const LISTED: usize = 20;

#[derive(Debug, Args)]
pub struct BackfillArgs {
    #[command(flatten)]
    pub connect: ConnectArgs,
    /// The job (of the job table: its schedule gives the ticks).
    pub job: String,
    /// The first instant of the range (RFC 3339, e.g.
    /// 2026-03-24T00:00:00Z, or ms since the epoch).
    #[arg(long, value_name = "T", value_parser = operator::parse_tick)]
    pub from: i64,
    /// The last instant of the range, included (same forms as --from).
    #[arg(long, value_name = "T", value_parser = operator::parse_tick)]
    pub to: i64,
    /// Print the plan and change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// At most this many backfill runs of the job at once across the
    /// cluster (with `overlap = "skip"` or `"replace"` one run of the job
    /// holds its lease, so runs go one at a time whatever this says).
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub concurrency: u32,
    /// Stop watching (exit 1) after this long; the backfill goes on.
    #[arg(long, value_name = "D", default_value = "24h", value_parser = parse_cli_duration)]
    pub timeout: Duration,
    /// Print JSON lines: the plan, then each outcome as it lands (the
    /// schema of `history --json`'s outcomes).
    #[arg(long)]
    pub json: bool,
}

/// `cronlease backfill`.
pub(super) fn backfill(args: &BackfillArgs) -> Exit {
    operator_command(
        &args.connect,
        |target| async move { run(args, target).await },
    )
}

async fn run(args: &BackfillArgs, target: Target) -> Result<String, Failure> {
    let Some(config) = &target.config else {
        return Err(Failure::Invalid(
            "backfill needs the job table (--config FILE): the job's schedule gives the ticks"
                .to_string(),
        ));
    };
    let Some(job) = config.jobs.get(&args.job) else {
        let names: Vec<&str> = config.jobs.keys().map(String::as_str).collect();
        return Err(Failure::Invalid(format!(
            "unknown job {:?}: not in the job table (its jobs: {})",
            escape(&args.job),
            names.join(", ")
        )));
    };
    let mode = if args.dry_run {
        PlanMode::DryRun
    } else {
        PlanMode::Queue
    };
    let since_ms = target.store.server_time_ms().await?;
    let who = operator::operator_identity();
    let request = BackfillRequest {
        job,
        from_ms: args.from,
        to_ms: args.to,
        concurrency: args.concurrency,
        mode,
        who: &who,
    };
    let report = operator::backfill(&target.store, &request)
        .await
        .map_err(|e| match e {
            BackfillRefusal::Input(e) => Failure::Invalid(e.to_string()),
            BackfillRefusal::Operator(e) => Failure::from(e),
        })?;
    if args.json {
        print!("{}", super::json_line(&report));
    } else {
        print!("{}", plan_text(&report));
    }
    if mode == PlanMode::DryRun || report.to_run.is_empty() {
        return Ok(String::new());
    }
    let mut counts = Counts::default();
    let landed = |entry: &HistoryEntry| {
        counts.add(entry.status);
        if args.json {
            print!("{}", super::json_line(entry));
        } else {
            println!(
                "  {}  {}  on {} (fence {}, run {})",
                entry.tick,
                entry.status,
                escape(&entry.replica),
                entry.fence,
                escape(&entry.run_id)
            );
        }
    };
    let mut interrupt = signal(SignalKind::interrupt())
        .map_err(|e| Failure::Runtime(format!("cannot watch for Ctrl-C: {e}")))?;
    let left = tokio::select! {
        left = operator::follow_backfill(&target.store, &report, since_ms, args.timeout, landed) => left?,
        _ = interrupt.recv() => {
            eprintln!(
                "stopped watching: the backfill goes on (`cronlease status` shows the ticks left; nothing was cancelled)"
            );
            return Err(Failure::Exit(Exit::Failure));
        }
    };
    let summary = finish(&report, &counts, &left);
    // JSON lines: each outcome was one; the exit status says the rest.
    if args.json {
        return summary.map(|_| String::new());
    }
    summary
}

/// The end of the watch: exit 0 when every queued tick ran `ok`.
fn finish(report: &BackfillReport, counts: &Counts, left: &[i64]) -> Result<String, Failure> {
    if !left.is_empty() {
        eprintln!(
            "error: {} of {} queued ticks have no outcome yet after the timeout; the backfill goes on",
            left.len(),
            report.to_run.len()
        );
        return Err(Failure::Exit(Exit::Failure));
    }
    let text = format!(
        "{} ticks backfilled: {} ok, {} not ok\n",
        report.to_run.len(),
        counts.ok,
        counts.not_ok
    );
    if counts.not_ok > 0 {
        eprint!("{text}");
        return Err(Failure::Exit(Exit::Failure));
    }
    Ok(text)
}

/// Outcomes landed so far.
#[derive(Default)]
struct Counts {
    ok: usize,
    not_ok: usize,
}

impl Counts {
    fn add(&mut self, status: Status) {
        if status == Status::Ok {
            self.ok += 1;
        } else {
            self.not_ok += 1;
        }
    }
}

/// The plan as text: the counts, the ticks that ran (each with its
/// outcome and run id), those left to the schedule, those to run.
fn plan_text(report: &BackfillReport) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "backfill of {} from {} to {}: {} ticks to run, {} already ran, {}{} left to the schedule",
        report.job,
        report.from,
        report.to,
        report.to_run.len(),
        report.skipped.len(),
        match report.excluded.len() {
            0 => String::new(),
            n => format!("{n} left out by calendars, "),
        },
        report.later.len()
    );
    if !report.skipped.is_empty() {
        let _ = writeln!(out, "skipped, already ran:");
        for s in &report.skipped {
            let _ = writeln!(
                out,
                "  {}  {}  {}  run {}",
                s.tick,
                s.why.as_str(),
                escape(&s.status),
                escape(&s.run_id)
            );
        }
    }
    if !report.excluded.is_empty() {
        let _ = writeln!(out, "left out by the job's calendars:");
        for e in &report.excluded {
            let _ = writeln!(out, "  {}  {} {}", e.tick, e.rule, e.calendar);
        }
    }
    if !report.later.is_empty() {
        let _ = writeln!(
            out,
            "left to the schedule (after its high-water mark {}):",
            report
                .last_tick
                .as_deref()
                .unwrap_or("none: no tick claimed yet")
        );
        list(&mut out, report.later.iter().map(|t| t.tick.as_str()));
    }
    if !report.to_run.is_empty() {
        let _ = writeln!(out, "to run:");
        list(&mut out, report.to_run.iter().map(|t| t.tick.as_str()));
    }
    if report.dry_run {
        let _ = writeln!(out, "dry run: nothing queued");
    } else if !report.to_run.is_empty() {
        let _ = writeln!(
            out,
            "queued as backfill {}; waiting for each outcome (Ctrl-C stops watching, the backfill goes on)",
            report.id
        );
        if report.paused {
            let _ = writeln!(
                out,
                "the job is paused: its backfill waits for `cronlease resume {}`",
                report.job
            );
        }
    }
    out
}

/// The first [`LISTED`] of `ticks`, one a line, then how many more.
fn list<'a>(out: &mut String, ticks: impl ExactSizeIterator<Item = &'a str>) {
    let n = ticks.len();
    for tick in ticks.take(LISTED) {
        let _ = writeln!(out, "  {tick}");
    }
    if n > LISTED {
        let _ = writeln!(out, "  … and {} more (--json lists them all)", n - LISTED);
    }
}
