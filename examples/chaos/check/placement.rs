//! G: placement limits. The concurrency group's runs (`grouped-a` and
//! `grouped-b`, group `GROUP`) never more than its `max` at once across
//! the cluster, and no replica with more than its `[daemon] max_runs`
//! runs at once (reruns excepted: a rerun a finish or a sweep hands over
//! is counted on top). Runs are intervals as for O (an `end` line, or the
//! run's own outcome, or its replica's kill -9); an episode above the
//! limit is excused in a state-loss window (a Redis that forgot a slot
//! lets another run take it) and, for the group, when a run's replica was
//! frozen while it held it (its child process runs on while the slot
//! lapses: the fence's case). Embedded replicas are not checked: the
//! library's schedulers have neither setting.

use std::collections::BTreeSet;

use super::facts::Facts;
use super::overlap::{FROZEN_DAEMON_KILL_MS, Interval, intervals_of, sigcont_of_holder, sweep};
use super::{Excuse, Report, Violation};
use crate::ReplicaKind;
use crate::harness::config::{GROUP, JOBS, MAX_RUNS};
use crate::wall::clock;

/// The jobs of the group.
fn group_jobs() -> Vec<&'static str> {
    JOBS.iter()
        .filter(|(_, extra, _)| extra.contains(&format!("group = \"{}\"", GROUP.0)))
        .map(|(job, _, _)| *job)
        .collect()
}

pub fn check_g(facts: &Facts, report: &mut Report) {
    if facts.input.replica_kind == ReplicaKind::Embedded {
        report
            .warnings
            .push("G not checked: embedded replicas have no max_runs nor groups".to_string());
        return;
    }
    let jobs = group_jobs();
    let group = intervals_of(facts, |e| jobs.contains(&e.job.as_str()), report);
    report.g_group_max = episodes(facts, &group, GROUP.1, Limit::Group, report);
    let mut replicas: BTreeSet<&str> = BTreeSet::new();
    replicas.extend(facts.start_of.values().map(|e| e.replica.as_str()));
    for replica in replicas {
        let own = intervals_of(facts, |e| e.replica == replica, report);
        let most = episodes(facts, &own, MAX_RUNS, Limit::Capacity, report);
        report.g_capacity_max = report.g_capacity_max.max(most);
    }
}

/// Which limit an episode broke.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Limit {
    Group,
    Capacity,
}

/// Records each episode of `intervals` above `limit` as a finding; the
/// most at once outside the excused episodes.
fn episodes(
    facts: &Facts,
    intervals: &[Interval],
    limit: usize,
    kind: Limit,
    report: &mut Report,
) -> usize {
    let events = sweep(intervals);
    let mut open: BTreeSet<usize> = BTreeSet::new();
    let mut episode: BTreeSet<usize> = BTreeSet::new();
    let (mut episode_max, mut counted) = (0, 0);
    for (_, delta, n) in events {
        if delta > 0 {
            open.insert(n);
            if open.len() > limit {
                episode.extend(open.iter().copied());
                episode_max = episode_max.max(open.len());
            }
            counted = counted.max(open.len().min(limit));
        } else {
            open.remove(&n);
            if open.len() <= limit && !episode.is_empty() {
                let finding = finding(facts, intervals, &episode, episode_max, kind);
                if !finding.excused() {
                    counted = counted.max(episode_max);
                }
                report.g.push(finding);
                episode.clear();
                episode_max = 0;
            }
        }
    }
    counted
}

fn finding(
    facts: &Facts,
    intervals: &[Interval],
    runs: &BTreeSet<usize>,
    most: usize,
    kind: Limit,
) -> Violation {
    let evidence: Vec<String> = runs
        .iter()
        .map(|&i| {
            let (from, to, e) = intervals[i];
            format!(
                "run {} of {} tick {} on {}: ran {} – {}",
                e.run_id,
                e.job,
                clock(e.tick),
                e.replica,
                clock(from),
                clock(to)
            )
        })
        .collect();
    let first = runs.iter().map(|&i| intervals[i].2).min_by_key(|e| e.wall);
    let state_loss = runs.iter().any(|&i| {
        let (from, _, e) = intervals[i];
        facts.in_state_loss(e.tick) || facts.in_state_loss(from)
    });
    let frozen = kind == Limit::Group
        && runs.iter().any(|&i| {
            let (_, to, start) = intervals[i];
            sigcont_of_holder(facts, &start.run_id)
                .is_some_and(|cont| to <= cont + FROZEN_DAEMON_KILL_MS)
        });
    let excuse = if state_loss {
        Some(Excuse::Window)
    } else if frozen {
        Some(Excuse::FrozenHolder)
    } else {
        None
    };
    let (job, message) = match kind {
        Limit::Group => (
            format!("group {}", GROUP.0),
            format!("{most} runs of the group at once (max {})", GROUP.1),
        ),
        Limit::Capacity => (
            format!("replica {}", first.map_or("?", |e| e.replica.as_str())),
            format!("{most} runs on one replica at once (max_runs {MAX_RUNS})"),
        ),
    };
    Violation {
        job,
        tick: first.map(|e| e.tick),
        message,
        evidence,
        excuse,
    }
}
