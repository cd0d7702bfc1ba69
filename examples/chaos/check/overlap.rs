//! O: the most runs of one non-`allow` job at once, from start/end lines
//! (reruns excepted). A run without an `end` line ended when its own
//! outcome says, or when its replica was killed, whichever is first; for
//! embedded replicas also when its replica was frozen (SIGSTOP freezes the
//! handler with it, where a daemon's child process runs on). Each episode
//! of overlapping runs is a finding, excused in a state-loss window (a
//! Redis that forgot a lease lets a second run start) and when a run's
//! replica was frozen while it held it (a paused process: the fence's
//! case, not the lease's): for a daemon, whose child process runs on while
//! it is frozen, as long as the run ended by the time the woken daemon's
//! kill lands (`FROZEN_DAEMON_KILL_MS` after SIGCONT); the figure outside
//! those windows is the largest episode not excused (1: none).

use std::collections::BTreeSet;

use super::facts::Facts;
use super::{Excuse, Report, Violation};
use crate::ReplicaKind;
use crate::faults::FaultKind;
use crate::harness::config::{ALLOW_JOB, all_jobs};
use crate::records::Effect;
use crate::wall::{clock, rfc3339};

/// How long after SIGCONT a frozen daemon's run may go on: the daemon
/// stops its runs at once when it wakes (SIGTERM, SIGKILL after its
/// `kill_grace` of 1 s), plus slack.
pub(super) const FROZEN_DAEMON_KILL_MS: i64 = 1_500;

/// A run's start and end (wall ms) and its start line.
pub(super) type Interval<'a> = (i64, i64, &'a Effect);

pub fn check_o(facts: &Facts, report: &mut Report) {
    for job in all_jobs() {
        if job == ALLOW_JOB {
            continue;
        }
        let intervals = intervals(facts, job, report);
        let events = sweep(&intervals);
        let mut open: BTreeSet<usize> = BTreeSet::new();
        let mut max = 0;
        // Runs that overlapped since the last instant nothing ran.
        let mut episode: BTreeSet<usize> = BTreeSet::new();
        let mut episode_max = 0;
        for (_, delta, n) in events {
            if delta > 0 {
                open.insert(n);
                if open.len() > 1 {
                    episode.extend(open.iter().copied());
                    episode_max = episode_max.max(open.len());
                }
                max = max.max(open.len());
            } else {
                open.remove(&n);
                if open.is_empty() && !episode.is_empty() {
                    let finding = overlap(facts, job, &intervals, &episode, episode_max);
                    if !finding.excused() {
                        report.o_outside = report.o_outside.max(episode_max);
                    }
                    report.o.push(finding);
                    episode.clear();
                    episode_max = 0;
                }
            }
        }
        report.o_max.insert(job.to_string(), max);
        report.o_outside = report.o_outside.max(max.min(1));
        // Every interval has ended: an episode left open would be a bug.
        debug_assert!(open.is_empty(), "runs of {job} never ended");
    }
}

/// The runs of `job` (reruns excepted) as intervals; a run whose end is
/// unknown is left out, with a warning.
/// The starts (+1) and ends (-1) of `intervals` by instant, each with its
/// interval's index; ends sort before starts at the same instant.
pub(super) fn sweep(intervals: &[Interval]) -> Vec<(i64, i32, usize)> {
    let mut events: Vec<(i64, i32, usize)> = Vec::new();
    for (n, (from, to, _)) in intervals.iter().enumerate() {
        events.push((*from, 1, n));
        events.push((*to, -1, n));
    }
    events.sort_by_key(|&(at, delta, _)| (at, delta));
    events
}

fn intervals<'a>(facts: &Facts<'a>, job: &str, report: &mut Report) -> Vec<Interval<'a>> {
    intervals_of(facts, |e| e.job == job, report)
}

/// The runs whose start line `keep` picks (reruns excepted) as
/// intervals; a run whose end is unknown is left out, with a warning.
pub(super) fn intervals_of<'a>(
    facts: &Facts<'a>,
    keep: impl Fn(&Effect) -> bool,
    report: &mut Report,
) -> Vec<Interval<'a>> {
    let mut intervals = Vec::new();
    let mut starts: Vec<&&Effect> = facts.start_of.values().filter(|e| keep(e)).collect();
    starts.sort_by_key(|e| (e.wall, e.run_id.as_str()));
    for start in starts {
        let job = start.job.as_str();
        if facts.is_rerun_run(&start.run_id) {
            continue;
        }
        let Some(end) = run_end(facts, start) else {
            report.warnings.push(format!(
                "run {} of {job} ({}) has no end line, no own outcome and no kill: \
                 left out of O",
                start.run_id,
                rfc3339(start.tick)
            ));
            continue;
        };
        // At least 1 ms: a run's end sorts after its own start (ends sort
        // before starts at the same instant).
        intervals.push((start.wall, end.max(start.wall + 1), *start));
    }
    intervals
}

/// One episode of overlapping runs of a non-`allow` job.
fn overlap(
    facts: &Facts,
    job: &str,
    intervals: &[Interval],
    runs: &BTreeSet<usize>,
    most: usize,
) -> Violation {
    let mut evidence: Vec<String> = runs
        .iter()
        .map(|&i| {
            let (from, to, e) = intervals[i];
            format!(
                "run {} tick {} on {}: ran {} – {}",
                e.run_id,
                clock(e.tick),
                e.replica,
                clock(from),
                clock(to)
            )
        })
        .collect();
    let ids: Vec<&str> = runs
        .iter()
        .map(|&i| intervals[i].2.run_id.as_str())
        .collect();
    evidence.extend(facts.evidence(job, None, &ids));
    let first = runs.iter().map(|&i| intervals[i].2.tick).min();
    // Redis forgot the lease: a run may start beside one it cannot see.
    let state_loss = runs.iter().any(|&i| {
        let (from, _, e) = intervals[i];
        facts.in_state_loss(e.tick) || facts.in_state_loss(from)
    });
    // An embedded replica frozen past its lease freezes its handler with
    // it: the handler goes on for a moment after SIGCONT, before its stop
    // signal lands — a paused process, which only the fence can answer
    // (the store refusing the stale writer), not the lease. A frozen
    // daemon's child process runs on meanwhile (guarantees.md: "a replica
    // is frozen past its lease"), until it ends or the woken daemon kills it.
    let frozen = runs.iter().any(|&i| {
        let (_, to, start) = intervals[i];
        sigcont_of_holder(facts, &start.run_id).is_some_and(|cont| {
            facts.input.replica_kind == ReplicaKind::Embedded || to <= cont + FROZEN_DAEMON_KILL_MS
        })
    });
    let excuse = if state_loss {
        Some(Excuse::Window)
    } else if frozen {
        Some(Excuse::FrozenHolder)
    } else {
        None
    };
    Violation {
        job: job.to_string(),
        tick: first,
        message: format!("{most} runs at once ({} runs overlap)", runs.len()),
        evidence,
        excuse,
    }
}

/// When the suite woke (SIGCONT) the replica it froze while `run_id` was
/// running there, if it did.
pub(super) fn sigcont_of_holder(facts: &Facts, run_id: &str) -> Option<i64> {
    facts
        .input
        .faults
        .iter()
        .filter(|f| f.kind == FaultKind::Sigstop)
        .find(|f| {
            f.detail["held"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|held| held["run_id"].as_str() == Some(run_id))
        })
        .map(|f| f.end_ms)
}

/// When a run without an `end` line ended: its own outcome's finish, or the
/// kill -9 of its replica, whichever came first.
fn run_end(facts: &Facts, start: &Effect) -> Option<i64> {
    if let Some(end) = facts.end_of.get(&start.run_id) {
        return Some(end.wall);
    }
    let own = facts
        .records_of_run(&start.run_id)
        .iter()
        .filter(|r| r.status() != "abandoned")
        .map(|r| r.number("finished_ms"))
        .min();
    // A frozen embedded replica's handler is frozen with it.
    let ends_it = |kind: FaultKind| {
        kind == FaultKind::Kill9
            || (kind == FaultKind::Sigstop && facts.input.replica_kind == ReplicaKind::Embedded)
    };
    let killed = facts
        .input
        .faults
        .iter()
        .filter(|f| ends_it(f.kind) && f.target.as_deref() == Some(start.replica.as_str()))
        .map(|f| f.start_ms)
        .filter(|&at| at >= start.wall)
        .min();
    match (own, killed) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}
