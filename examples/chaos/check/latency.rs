//! Takeover and abort latency (measured, not judged): how long the jobs a
//! killed replica held waited for another replica, and how long a frozen
//! replica took to give up the runs whose lease had lapsed.

use std::collections::BTreeSet;

use chrono::DateTime;

use super::Report;
use super::facts::Facts;
use crate::faults::FaultKind;
use crate::harness::config::{ALLOW_JOB, LEASE_MS};

/// Takeover: kill -9 of a replica holding a run of a non-`allow` job → the
/// next start of that job on another replica (and on any replica, the
/// killed one restarted included).
pub fn measure_takeover(facts: &Facts, report: &mut Report) {
    for fault in facts
        .input
        .faults
        .iter()
        .filter(|f| f.kind == FaultKind::Kill9)
    {
        let target = fault.target.as_deref().unwrap_or("");
        let jobs: BTreeSet<&str> = fault.detail["held"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|h| h["job"].as_str())
            .filter(|job| *job != ALLOW_JOB)
            .collect();
        for job in jobs {
            let after = fault.start_ms;
            report
                .takeover
                .extend(next_start(facts, job, after, Some(target)));
            report
                .takeover_any
                .extend(next_start(facts, job, after, None));
        }
    }
}

/// Ms from `at` to the first start of `job` at or after it, on a replica
/// other than `excluded`, if any.
fn next_start(facts: &Facts, job: &str, at: i64, excluded: Option<&str>) -> Option<i64> {
    facts
        .start_of
        .values()
        .filter(|e| e.job == job && e.wall >= at)
        .filter(|e| excluded.is_none_or(|name| e.replica != name))
        .map(|e| e.wall - at)
        .min()
}

/// Abort latency: for each run the frozen replica held at SIGSTOP, the
/// first log line of its watchdog giving it up after SIGCONT.
pub fn measure_abort(facts: &Facts, report: &mut Report) {
    for fault in facts
        .input
        .faults
        .iter()
        .filter(|f| f.kind == FaultKind::Sigstop)
    {
        let target = fault.target.as_deref().unwrap_or("");
        let skew = fault.detail["skew_ms"].as_i64().unwrap_or(0);
        let Some((_, log)) = facts.input.logs.iter().find(|(name, _)| name == target) else {
            continue;
        };
        for held in fault.detail["held"].as_array().into_iter().flatten() {
            let Some(run_id) = held["run_id"].as_str() else {
                continue;
            };
            report.held_at_stop += 1;
            if facts
                .end_of
                .get(run_id)
                .is_some_and(|end| end.wall < fault.end_ms)
            {
                report.ended_while_frozen += 1;
            }
            let aborted = log
                .lines()
                .filter(|line| {
                    line.contains(run_id)
                        && (line.contains("lease could not be renewed before its deadline")
                            || line.contains("lease is no longer ours"))
                })
                .filter_map(log_time)
                .map(|at| at - skew)
                .find(|&at| at >= fault.end_ms - 100);
            if let Some(at) = aborted {
                report.abort_latency.push(at - (fault.start_ms + LEASE_MS));
                report.abort_after_cont.push(at - fault.end_ms);
            }
        }
    }
}

/// The wall ms of a text log line (`2026-11-22T06:46:55.430482Z  INFO …`).
fn log_time(line: &str) -> Option<i64> {
    let stamp = line.split_whitespace().next()?;
    DateTime::parse_from_rfc3339(stamp)
        .ok()
        .map(|t| t.timestamp_millis())
}
