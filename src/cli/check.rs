//! `cronlease check`: the job table validated, and its next ticks shown as
//! text or JSON.

use std::io::Write;

use chrono::{DateTime, SecondsFormat, Utc};

use super::CheckArgs;
use crate::config::{Config, EventKind, Job, Join};
use crate::exit::Exit;
use crate::schedule::Timing;

/// `cronlease check`.
pub(super) fn check(args: &CheckArgs) -> Exit {
    let from = args.from.unwrap_or_else(crate::clock::local_now_utc);
    let config = match Config::load(&args.config.config) {
        Ok(config) => config,
        Err(e) => {
            eprintln!("error: {e}");
            return Exit::InvalidInput;
        }
    };
    let count = usize::from(args.count);
    let out = if args.json {
        check_json(&config, from, count)
    } else {
        check_text(&config, from, count)
    };
    match std::io::stdout().lock().write_all(out.as_bytes()) {
        Ok(()) => Exit::Success,
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Exit::Success,
        Err(e) => {
            eprintln!("error: cannot write to stdout: {e}");
            Exit::Failure
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
            let mut entry = serde_json::json!({
                "name": job.name,
                "after": job.after.as_ref().map(|after| serde_json::json!({
                    "jobs": after.upstreams,
                    "on": after.on.as_str(),
                    "all": after.join == Join::All,
                })),
                "followers": job.followers.iter().map(|f| serde_json::json!({
                    "job": f.job,
                    "on": f.on.as_str(),
                })).collect::<Vec<_>>(),
                "notify": {
                    "channels": job.notify.channels,
                    "on": job.notify.on.iter().map(EventKind::as_str).collect::<Vec<_>>(),
                },
            });
            if let Some(schedule) = &job.schedule {
                let next: Vec<String> = schedule
                    .upcoming(from, count)
                    .into_iter()
                    .map(rfc3339_utc)
                    .collect();
                let first = schedule.first();
                let dst = first.dst();
                let window = schedule.window();
                let fields = serde_json::json!({
                    "schedule": schedule.expression(),
                    "resolved": schedule.resolved(),
                    "schedules": schedule.schedules().iter().map(|s| serde_json::json!({
                        "expression": s.expression(),
                        "resolved": s.resolved(),
                        "timing": s.timing().as_str(),
                    })).collect::<Vec<_>>(),
                    "timezone": schedule.timezone().name(),
                    "timing": first.timing().as_str(),
                    "dst_gap": dst.gap.as_str(),
                    "dst_repeat": dst.repeat.as_str(),
                    "active_from": window.from.map(rfc3339_utc),
                    "active_until": window.until.map(rfc3339_utc),
                    "max_runs": job.max_runs,
                    // No tick after `from` (count is at least 1): the schedule ended.
                    "ended": next.is_empty(),
                    "next": next,
                });
                if let (Some(entry), serde_json::Value::Object(fields)) =
                    (entry.as_object_mut(), fields)
                {
                    entry.extend(fields);
                }
            }
            entry
        })
        .collect();
    let warnings = config.warnings(from);
    let channels: Vec<serde_json::Value> = config
        .notify
        .iter()
        .map(|(name, spec)| {
            serde_json::json!({ "name": name, "kind": spec.kind(), "target": spec.describe() })
        })
        .collect();
    let replica_dead = config.daemon.notify.replica_dead_channels();
    let mut text = serde_json::json!({
        "jobs": jobs,
        "channels": channels,
        "replica_dead": replica_dead,
        "warnings": warnings,
    })
    .to_string();
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
    for warning in config.warnings(from) {
        let _ = writeln!(out, "warning: {warning}");
    }
    channels_text(&mut out, config);
    for job in config.jobs.values() {
        job_text(&mut out, job, from, count);
    }
    out
}

/// One job's lines of `check`'s text: its schedule, its place in chains,
/// its notifications and its next fire times.
fn job_text(out: &mut String, job: &Job, from: DateTime<Utc>, count: usize) {
    use std::fmt::Write as _;
    let _ = write!(out, "\n{}", job.name);
    match &job.schedule {
        Some(timetable) => {
            // Each expression on a line of its own, under the first.
            let indent = " ".repeat(job.name.chars().count());
            for (i, schedule) in timetable.schedules().iter().enumerate() {
                if i > 0 {
                    let _ = write!(out, "{indent}");
                }
                let _ = write!(out, "  {:?}", schedule.expression());
                if schedule.resolved() != schedule.expression() {
                    let _ = write!(out, " = {:?}", schedule.resolved());
                }
                let dst = schedule.dst();
                let timing = match schedule.timing() {
                    Timing::WallClock => "wall clock".to_string(),
                    Timing::FixedTime => format!(
                        "fixed time, dst_gap {}, dst_repeat {}",
                        dst.gap.as_str(),
                        dst.repeat.as_str()
                    ),
                };
                let _ = writeln!(out, "  ({}; {timing})", schedule.timezone().name());
            }
            for bound in bounds_lines(job) {
                let _ = writeln!(out, "  {bound}");
            }
        }
        None => {
            let _ = writeln!(out, "  (no schedule)");
        }
    }
    if let Some(after) = &job.after {
        let join = match after.join {
            Join::All => ", once all have one for the same root tick",
            Join::Each => "",
        };
        let _ = writeln!(
            out,
            "  after {} (each {} outcome{join})",
            after.upstreams.join(", "),
            after.on.as_str()
        );
    }
    if !job.followers.is_empty() {
        let followers: Vec<String> = job
            .followers
            .iter()
            .map(|f| format!("{} (on {})", f.job, f.on.as_str()))
            .collect();
        let _ = writeln!(out, "  then {}", followers.join(", "));
    }
    let rules = &job.notify;
    if !rules.channels.is_empty() {
        let on: Vec<&str> = rules.on.iter().map(EventKind::as_str).collect();
        let _ = writeln!(
            out,
            "  notify {} on {}",
            rules.channels.join(", "),
            on.join(", ")
        );
    }
    let Some(schedule) = &job.schedule else {
        return;
    };
    let ticks = schedule.upcoming(from, count);
    if ticks.is_empty() {
        let _ = writeln!(out, "  no fire time after {}", rfc3339_utc(from));
    }
    for tick in ticks {
        let _ = writeln!(
            out,
            "  {}  =  {}",
            schedule.timezone().format_local(tick),
            rfc3339_utc(tick)
        );
    }
}

/// When the job's ticks start and end (`active_from`, `active_until`)
/// and how many may run (`max_runs`), a line each.
fn bounds_lines(job: &Job) -> Vec<String> {
    let window = job
        .schedule
        .as_ref()
        .map(|t| t.window())
        .unwrap_or_default();
    let zone = job.schedule.as_ref().map(|t| t.timezone());
    let local = |t: DateTime<Utc>| match zone {
        Some(zone) => format!("{} ({})", zone.format_local(t), rfc3339_utc(t)),
        None => rfc3339_utc(t),
    };
    let mut parts = Vec::new();
    if let Some(from) = window.from {
        parts.push(format!("active from {}", local(from)));
    }
    if let Some(until) = window.until {
        parts.push(format!("active until {}, not included", local(until)));
    }
    if let Some(n) = job.max_runs {
        parts.push(format!(
            "at most {n} run{} of its schedule",
            if n == 1 { "" } else { "s" }
        ));
    }
    parts
}

/// The notification channels, one line each and never a secret, and
/// where a dead replica is announced.
fn channels_text(out: &mut String, config: &Config) {
    use std::fmt::Write as _;
    if config.notify.is_empty() {
        return;
    }
    let _ = writeln!(out, "\nnotification channels:");
    for (name, spec) in &config.notify {
        let _ = writeln!(out, "  {name}  {}", spec.describe());
    }
    let replica_dead = config.daemon.notify.replica_dead_channels();
    if !replica_dead.is_empty() {
        let _ = writeln!(out, "  replica_dead: {}", replica_dead.join(", "));
    }
}
