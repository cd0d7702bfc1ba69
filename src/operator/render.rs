//! The text output of the operator commands: aligned tables, colour only on
//! a terminal, rendered from the same reports `--json` prints.

use std::fmt::Write as _;
use std::time::Duration;

use chrono::DateTime;

use super::{HistoryReport, JobStatus, StatusReport};
use crate::calendar::CalendarRule;
use crate::inert::escape;
use crate::store::{DeliveryFailure, GaveUp};

/// Whether text output is coloured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Colour {
    On,
    Off,
}

/// Colour only on a terminal, and never with `NO_COLOR` set.
pub fn use_colour() -> Colour {
    if std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
        && std::io::IsTerminal::is_terminal(&std::io::stdout())
    {
        Colour::On
    } else {
        Colour::Off
    }
}

fn paint(text: &str, colour: Colour) -> String {
    if colour == Colour::Off {
        return text.to_string();
    }
    if let Some(rest) = text.strip_prefix("paused by ") {
        return paint("paused", colour) + " by " + rest;
    }
    if let Some(rest) = text.strip_prefix("excluded (") {
        return paint("excluded", colour) + " (" + rest;
    }
    if let Some(rest) = text.strip_prefix("skipped_capacity (") {
        return paint("skipped_capacity", colour) + " (" + rest;
    }
    let code = match text {
        "ok" | "alive" => "32",
        "failed" | "timeout" | "lost_lease" | "abandoned" | "dead" => "31",
        "interrupted" | "killed" | "skipped_overlap" | "skipped_capacity" | "paused"
        | "not_durable" | "CLUSTER PAUSED" => "33",
        "excluded" => "36",
        _ => return text.to_string(),
    };
    format!("\u{1b}[{code}m{text}\u{1b}[0m")
}

/// Aligns `rows` (the first is the header) in columns two spaces apart.
/// Every cell's control characters are escaped first (names and values
/// come from Redis: see `crate::inert`); widths count characters of the
/// unpainted text; painting is applied after.
fn table(rows: &[Vec<String>], colour: Colour) -> String {
    let rows: Vec<Vec<String>> = rows
        .iter()
        .map(|row| {
            row.iter()
                .map(|cell| crate::inert::escape(cell).into_owned())
                .collect()
        })
        .collect();
    let rows = &rows;
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns)
        .map(|c| {
            rows.iter()
                .filter_map(|r| r.get(c))
                .map(|v| v.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for (i, row) in rows.iter().enumerate() {
        let mut line = String::new();
        for (c, cell) in row.iter().enumerate() {
            let shown = if i == 0 {
                cell.clone()
            } else {
                paint(cell, colour)
            };
            line.push_str(&shown);
            if c + 1 < row.len() {
                line.push_str(&" ".repeat(widths[c] - cell.chars().count() + 2));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// "12s ago", "3m ago", … relative to `now_ms`.
fn ago(now_ms: i64, then_ms: i64) -> String {
    let secs = (now_ms - then_ms).max(0) / 1000;
    match secs {
        0..=119 => format!("{secs}s ago"),
        120..=7199 => format!("{}m ago", secs / 60),
        7200..=172_799 => format!("{}h ago", secs / 3600),
        _ => format!("{}d ago", secs / 86_400),
    }
}

fn short(ms: i64) -> String {
    DateTime::from_timestamp_millis(ms)
        .map(|t| t.format("%Y-%m-%d %H:%M:%S").to_string())
        .unwrap_or_default()
}

fn duration(ms: i64) -> String {
    if ms < 10_000 {
        format!("{ms}ms")
    } else {
        humantime::format_duration(Duration::from_secs((ms / 1000).max(0) as u64)).to_string()
    }
}

/// An amount of memory given in KiB, in the largest unit that keeps it
/// at 1 or more: "812 KiB", "3.2 MiB", "100 MiB", "1.5 GiB".
fn memory(kb: u64) -> String {
    const UNITS: [&str; 3] = ["MiB", "GiB", "TiB"];
    if kb < 1024 {
        return format!("{kb} KiB");
    }
    let mut value = kb as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if value < 10.0 {
        format!("{value:.1} {}", UNITS[unit])
    } else {
        format!("{value:.0} {}", UNITS[unit])
    }
}

/// The text of `cronlease status`: the replicas, the jobs, and the jobs'
/// warnings if any.
pub fn render_status(report: &StatusReport, colour: Colour) -> String {
    let mut out = String::new();
    if let Some(pause) = &report.cluster_pause {
        let _ = writeln!(out, "{}\n", cluster_pause_line(pause, report, colour));
    }
    let _ = writeln!(out, "replicas ({}):", report.replicas.len());
    out.push_str(&table(&replica_rows(report), colour));
    let _ = writeln!(out, "\njobs ({}):", report.jobs.len());
    out.push_str(&table(&job_rows(report), colour));
    if !report.groups.is_empty() {
        let _ = writeln!(out, "\ngroups ({}):", report.groups.len());
        for group in &report.groups {
            let _ = writeln!(
                out,
                "{}  ({})",
                crate::inert::escape(&group.summary()),
                group.jobs.join(", ")
            );
        }
    }
    let warnings: Vec<String> = report
        .jobs
        .iter()
        .flat_map(|j| [&j.warning, &j.unplaced].map(|w| (j, w)))
        .filter_map(|(j, w)| w.as_ref().map(|w| format!("job {:?}: {w}", j.name)))
        .chain(report.channels.iter().filter_map(|c| {
            c.failure.as_ref().map(|f| channel_warning(report.now_ms, &c.channel, f))
        }))
        .chain(report.jobs.iter().filter_map(|j| {
            j.needs_repair.as_ref().map(|r| {
                let at = r.at_ms.map(|ms| format!(" {}", ago(report.now_ms, ms))).unwrap_or_default();
                format!(
                    "job {:?} needs repair: its state in Redis held {} = {:?}, which no replica writes (found{at}); check who writes to Redis, then run `cronlease repair {}`",
                    j.name, r.field, r.value, j.name
                )
            })
        }))
        .collect();
    if !warnings.is_empty() {
        let _ = writeln!(out, "\nwarnings ({}):", warnings.len());
        for warning in warnings {
            let _ = writeln!(out, "  {warning}");
        }
    }
    if !report.locks.is_empty() {
        let _ = writeln!(out, "\nlocks ({}):", report.locks.len());
        out.push_str(&table(&lock_rows(report), colour));
    }
    out
}

/// A channel whose last delivery failed: when, of what, why, and whether
/// it is still retried.
fn channel_warning(now_ms: i64, channel: &str, failure: &DeliveryFailure) -> String {
    let of = match &failure.job {
        Some(job) => format!("{} of job {job:?}", failure.event),
        None => failure.event.clone(),
    };
    let next = match failure.gave_up {
        GaveUp::Retrying => "retrying",
        GaveUp::Dropped => "dropped (refused for good, or retry_for passed)",
    };
    format!(
        "notification channel {channel:?}: the last delivery failed {} ({of}): {}; {next}",
        ago(now_ms, failure.at_ms),
        escape(&failure.error)
    )
}

/// The locks table of `status --lock`, header first.
fn lock_rows(report: &StatusReport) -> Vec<Vec<String>> {
    let mut rows = vec![
        [
            "lock",
            "holder",
            "host",
            "fence",
            "since",
            "time left",
            "holds",
        ]
        .map(String::from)
        .to_vec(),
    ];
    for lock in &report.locks {
        let or_dash = |v: Option<String>| v.unwrap_or_else(|| "-".to_string());
        rows.push(vec![
            lock.name.clone(),
            lock.holder.clone().unwrap_or_else(|| "(free)".to_string()),
            or_dash(lock.host.clone()),
            or_dash(lock.fence.map(|f| f.to_string())),
            or_dash(lock.since_ms.map(|ms| ago(report.now_ms, ms))),
            or_dash(lock.time_left_ms.map(duration)),
            or_dash(lock.holds.map(|h| h.to_string())),
        ]);
    }
    rows
}

/// The replicas table of `status`, header first.
fn replica_rows(report: &StatusReport) -> Vec<Vec<String>> {
    let mut rows = vec![
        [
            "replica",
            "host",
            "pid",
            "version",
            "last seen",
            "state",
            "runs",
            "contained in",
        ]
        .map(String::from)
        .to_vec(),
    ];
    // Tags get a column when some replica has them.
    let tagged = report.replicas.iter().any(|r| !r.tags.is_empty());
    if tagged {
        rows[0].push("tags".to_string());
    }
    for r in &report.replicas {
        let mut row = vec![
            r.id.clone(),
            r.host.clone(),
            r.pid.to_string(),
            r.version.clone(),
            ago(report.now_ms, r.last_seen_ms),
            replica_state(r),
            r.runs_of_max(),
            r.containment.clone().unwrap_or_else(|| "-".to_string()),
        ];
        if tagged {
            row.push(if r.tags.is_empty() {
                "-".to_string()
            } else {
                r.tags.join(",")
            });
        }
        rows.push(row);
    }
    rows
}

/// A replica's state: `alive` or `dead`, and out of the rendezvous
/// `draining` or `drained` (with who drained it).
fn replica_state(r: &super::ReplicaStatus) -> String {
    let life = if r.alive { "alive" } else { "dead" };
    match (r.drain, &r.drained_by) {
        (None, _) => life.to_string(),
        (Some(drain), Some(mark)) if !mark.by.is_empty() => {
            format!("{life}, {} by {}", drain.as_str(), mark.by)
        }
        (Some(drain), _) => format!("{life}, {}", drain.as_str()),
    }
}

/// The jobs table of `status`, header first.
fn job_rows(report: &StatusReport) -> Vec<Vec<String>> {
    let mut rows = vec![
        [
            "job",
            "schedule",
            "zone",
            "next tick (UTC)",
            "state",
            "in flight",
            "last outcome",
            "missed",
            "drift",
        ]
        .map(String::from)
        .to_vec(),
    ];
    for j in &report.jobs {
        let mut state = pause_state(j, report.now_ms);
        if let Some(b) = &j.backfill {
            state = format!("{state}, backfill: {} of {} ticks left", b.left, b.queued);
        }
        rows.push(vec![
            j.name.clone(),
            schedule_cell(j),
            j.timezone.clone().unwrap_or_else(|| "?".to_string()),
            match (&j.next_tick, &j.warning) {
                (Some(tick), _) => tick.clone(),
                (None, Some(_)) => "never (see warnings)".to_string(),
                (None, None) => "?".to_string(),
            },
            match &j.needs_repair {
                Some(repair) => format!("NEEDS REPAIR ({})", repair.field),
                None => state,
            },
            in_flight(j, report.now_ms),
            last_outcome(j),
            j.missed_ticks.to_string(),
            if j.config_drift.is_empty() {
                "-".to_string()
            } else {
                format!("DIFFERS on {}", j.config_drift.join(", "))
            },
        ]);
    }
    rows
}

/// The job's schedule (`?` without the job table) and its place in
/// chains: `after` its upstreams, `then` its followers.
fn schedule_cell(j: &JobStatus) -> String {
    let mut parts = Vec::new();
    match &j.schedule {
        Some(schedule) => parts.push(schedule.clone()),
        None if j.after.is_empty() => parts.push("?".to_string()),
        None => {}
    }
    if !j.after.is_empty() {
        parts.push(format!("after {}", j.after.join(",")));
    }
    if !j.followers.is_empty() {
        parts.push(format!("then {}", j.followers.join(",")));
    }
    match (&j.active_from, &j.active_until) {
        (Some(from), Some(until)) => parts.push(format!("active {from} to {until}")),
        (Some(from), None) => parts.push(format!("active from {from}")),
        (None, Some(until)) => parts.push(format!("active until {until}")),
        (None, None) => {}
    }
    if let Some(max) = j.max_runs {
        parts.push(format!("{} of {max} runs", j.runs_started));
    }
    for rule in [CalendarRule::Exclude, CalendarRule::Only] {
        let names: Vec<&str> = j
            .calendars
            .iter()
            .filter(|c| c.rule == rule)
            .map(|c| c.name.as_str())
            .collect();
        if !names.is_empty() {
            parts.push(format!("{} {}", rule.as_str(), names.join(",")));
        }
    }
    parts.join("; ")
}

/// "active", or "paused by WHO AGO[, until T][: REASON]".
fn pause_state(j: &JobStatus, now_ms: i64) -> String {
    if j.paused {
        let by = j.paused_by.as_deref().unwrap_or("?");
        let at = j.paused_at_ms.map(|ms| ago(now_ms, ms)).unwrap_or_default();
        let until = j
            .paused_until_ms
            .map(|ms| format!(", until {} UTC", short(ms)))
            .unwrap_or_default();
        let reason = j
            .paused_reason
            .as_deref()
            .map(|r| format!(": {r}"))
            .unwrap_or_default();
        format!("paused by {by} {at}{until}{reason}")
    } else {
        "active".to_string()
    }
}

/// The banner of a cluster pause: who, since when, until when, why, and
/// the live replicas that do not hold it yet.
fn cluster_pause_line(
    pause: &crate::store::ClusterPause,
    report: &StatusReport,
    colour: Colour,
) -> String {
    let until = match pause.until_ms {
        Some(ms) => format!("until {} UTC", short(ms)),
        None => "until `cronlease resume --all`".to_string(),
    };
    let reason = if pause.reason.is_empty() {
        String::new()
    } else {
        format!(": {}", crate::inert::escape(&pause.reason))
    };
    let lagging: Vec<&str> = report
        .replicas
        .iter()
        .filter(|r| r.alive && r.cluster_pause.as_deref() != Some(pause.id.as_str()))
        .map(|r| r.id.as_str())
        .collect();
    let lagging = if lagging.is_empty() {
        String::new()
    } else {
        format!(" (not confirmed yet by {})", lagging.join(", "))
    };
    format!(
        "{} by {} {} {until}{reason}: no job's tick starts{lagging}",
        paint("CLUSTER PAUSED", colour),
        crate::inert::escape(&pause.by),
        ago(report.now_ms, pause.at_ms),
    )
}

/// The job's runs in flight: "-", the one run, or how many.
fn in_flight(j: &JobStatus, now_ms: i64) -> String {
    match j.running.as_slice() {
        [] => "-".to_string(),
        [run] => format!(
            "{} since {} fence {} run {}{}",
            run.replica,
            ago(now_ms, run.started_ms),
            run.fence,
            run.run_id,
            run.kill_asked_by
                .as_ref()
                .map_or_else(String::new, |who| format!(" (kill asked by {who})"))
        ),
        runs => format!("{} runs", runs.len()),
    }
}

/// The job's last outcome: status, tick, replica and duration, or "-".
fn last_outcome(j: &JobStatus) -> String {
    if let Some(tick) = &j.broadcast {
        return format!("last: {} ({})", tick.summary(), short(tick.tick_ms));
    }
    match &j.last_outcome {
        None => "-".to_string(),
        Some(o) => {
            let by = o
                .killed_by
                .as_ref()
                .map_or_else(String::new, |who| format!(" by {who}"));
            format!(
                "{}{by} {} on {} ({})",
                o.status,
                short(o.tick_ms),
                o.replica,
                duration(o.duration_ms)
            )
        }
    }
}

/// How a run came to be; for a follower's run, what it followed: `chain
/// after extract ok 1b2c3d4e` (the upstream run id's first characters).
fn trigger_cell(o: &super::HistoryEntry) -> String {
    let Some(upstream) = &o.upstream else {
        return o.trigger.as_str().to_string();
    };
    let runs: Vec<String> = upstream
        .runs()
        .iter()
        .map(|r| {
            let id: String = r.run_id().chars().take(8).collect();
            format!("{} {} {id}", r.job(), r.status())
        })
        .collect();
    format!("{} after {}", o.trigger.as_str(), runs.join(", "))
}

/// How a run's recorded output reaches a terminal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutputText {
    /// Control characters escaped (`\u{1b}`…): nothing a job printed moves
    /// the cursor, recolours the screen or retitles the terminal.
    Escaped,
    /// As the job printed it (`--raw`).
    Raw,
}

/// A last column of the runs' parameters (`name=value …`), only for a
/// job whose runs had some. `rows`: the header, then a row per outcome.
fn params_column(rows: &mut [Vec<String>], report: &HistoryReport) {
    if report.outcomes.iter().all(|o| o.params.is_empty()) {
        return;
    }
    if let Some(header) = rows.first_mut() {
        header.push("params".to_string());
    }
    for (row, o) in rows.iter_mut().skip(1).zip(&report.outcomes) {
        let params: Vec<String> = o.params.iter().map(|(n, v)| format!("{n}={v}")).collect();
        row.push(params.join(" "));
    }
}

/// The text of `cronlease history`.
pub fn render_history(report: &HistoryReport, colour: Colour, text: OutputText) -> String {
    let mut out = String::new();
    let mut rows = vec![
        [
            "tick (UTC)",
            "status",
            "replica",
            "fence",
            "duration",
            "cpu",
            "peak mem",
            "exit",
            "trigger",
            "run id",
        ]
        .map(String::from)
        .to_vec(),
    ];
    for o in &report.outcomes {
        let status = if o.stale {
            format!("{} (stale)", o.status_text())
        } else {
            o.status_text()
        };
        let exit = match (o.exit_code, o.signal) {
            (Some(code), _) => code.to_string(),
            (None, Some(signal)) => format!("signal {signal}"),
            (None, None) => "-".to_string(),
        };
        rows.push(vec![
            short(o.tick_ms),
            status,
            o.replica.clone(),
            o.fence.to_string(),
            duration(o.duration_ms),
            o.cpu_ms.map_or_else(
                || "-".to_string(),
                |ms| duration(i64::try_from(ms).unwrap_or(i64::MAX)),
            ),
            o.peak_memory_kb.map_or_else(|| "-".to_string(), memory),
            exit,
            trigger_cell(o),
            o.id.clone(),
        ]);
    }
    params_column(&mut rows, report);
    for bad in &report.unreadable {
        let _ = writeln!(
            out,
            "(left out: stream entry {} is unreadable: {})",
            bad.id, bad.reason
        );
    }
    if report.outcomes.iter().all(|o| o.output.is_none()) {
        out.push_str(&table(&rows, colour));
        return out;
    }
    let rendered = table(&rows, colour);
    let mut lines = rendered.lines();
    if let Some(header) = lines.next() {
        let _ = writeln!(out, "{header}");
    }
    for (line, outcome) in lines.zip(&report.outcomes) {
        let _ = writeln!(out, "{line}");
        for output_line in outcome.output.as_deref().unwrap_or_default().lines() {
            let shown = match text {
                OutputText::Escaped => crate::inert::escape_keeping_lines(output_line),
                OutputText::Raw => std::borrow::Cow::Borrowed(output_line),
            };
            let _ = writeln!(out, "    | {shown}");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_align_on_characters() {
        let rows = vec![
            vec!["a".to_string(), "bb".to_string(), "c".to_string()],
            vec![
                "\u{e9}\u{e9}\u{e9}".to_string(),
                "x".to_string(),
                "y".to_string(),
            ],
        ];
        assert_eq!(
            table(&rows, Colour::Off),
            "a    bb  c\n\u{e9}\u{e9}\u{e9}  x   y\n"
        );
    }

    #[test]
    fn memory_reads_in_its_largest_unit() {
        for (kb, text) in [
            (0, "0 KiB"),
            (812, "812 KiB"),
            (1024, "1.0 MiB"),
            (3277, "3.2 MiB"),
            (102_688, "100 MiB"),
            (1_572_864, "1.5 GiB"),
            (5 * 1024 * 1024 * 1024, "5.0 TiB"),
        ] {
            assert_eq!(memory(kb), text, "{kb} KiB");
        }
    }

    #[test]
    fn ages() {
        assert_eq!(ago(10_000, 4_000), "6s ago");
        assert_eq!(ago(600_000, 0), "10m ago");
        assert_eq!(ago(10_800_000, 0), "3h ago");
    }
}
