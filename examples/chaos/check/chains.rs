//! C: chains. Each current outcome of a run of the follower's upstreams
//! (`FOLLOWER_UPSTREAMS`) whose status its `after_on` matches leads to
//! exactly one run of the follower: one current follower record with
//! trigger `chain` whose `upstream_run_id` names it (a run, or the
//! `skipped_overlap` or `missed` that after.lua records instead), plus at
//! most one `rerun` record when that run was `abandoned`. Stale upstream
//! outcomes start nothing.
//!
//! Counted under the letters the tick properties use, since a follower's
//! runs have no ticks of their own:
//!
//! - **D**: two runs for one upstream outcome (distinct run ids among its
//!   `chain` records and the `start` lines naming it, reruns apart), or two
//!   reruns;
//! - **M**: an upstream outcome recorded in the checked window with no
//!   trace downstream (no follower record and no `start` line names it).
//!   The window ends `CHECK_MARGIN_MS` before the shutdown, as for the
//!   ticks: a later outcome's follower may not have run yet;
//! - **C** (its own letter): a follower record or `start` line that names
//!   no run of an upstream, a run of the wrong job, a stale outcome, or
//!   one whose status does not start the follower; whose `tick` is not
//!   when its cause was recorded, or whose `upstream_status` or
//!   `root_tick` differ from its cause's; a trigger other than `chain` or
//!   `rerun`; a current `rerun` without an `abandoned` `chain` record.
//!
//! Excused: a record in a state-loss window (an upstream record may be
//! gone); an outcome recorded in one, or whose run spans one (the inbox
//! entry or the follower's `caused` went with the data, and a holder's
//! finish after a wipe is current again, `restored`, beside the
//! `abandoned` a sweep recorded before it).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde_json::{Value, json};

use super::facts::Facts;
use super::{Excuse, Report, Violation};
use crate::harness::config::{FOLLOWER, FOLLOWER_UPSTREAMS, follower_follows};
use crate::records::Record;
use crate::wall::clock;

/// The chain figures of the report.
#[derive(Debug, Default)]
pub struct ChainFigures {
    /// Current upstream outcomes recorded in the checked window that start
    /// a run of the follower.
    pub upstream_outcomes: usize,
    /// Of those, followed by exactly one run (or its `skipped_overlap`).
    pub followed: usize,
    /// Of those, followed by more than one run (D).
    pub duplicated: usize,
    /// Of those, not followed at all (M), counted and excused.
    pub missing: usize,
    pub missing_excused: usize,
    /// Current follower records, by trigger and by status.
    pub records: usize,
    pub by_trigger: BTreeMap<String, usize>,
    pub by_status: BTreeMap<String, usize>,
    /// Follower runs that wrote a `start` line.
    pub starts: usize,
}

impl ChainFigures {
    pub fn to_json(&self) -> Value {
        json!({"upstreams": FOLLOWER_UPSTREAMS, "follower": FOLLOWER.0,
               "upstream_outcomes": self.upstream_outcomes, "followed": self.followed,
               "duplicated": self.duplicated, "missing": self.missing,
               "missing_excused": self.missing_excused, "follower_records": self.records,
               "by_trigger": self.by_trigger, "by_status": self.by_status,
               "follower_starts": self.starts})
    }
}

pub fn check_c(facts: &Facts, report: &mut Report) {
    let upstream: HashMap<&str, Vec<&Record>> = {
        let mut runs: HashMap<&str, Vec<&Record>> = HashMap::new();
        for record in facts.input.records {
            if FOLLOWER_UPSTREAMS.contains(&record.job.as_str()) && !record.run_id().is_empty() {
                runs.entry(record.run_id()).or_default().push(record);
            }
        }
        runs
    };
    let mut figures = ChainFigures::default();
    // Cause → the follower's records naming it.
    let mut by_cause: BTreeMap<&str, Vec<&Record>> = BTreeMap::new();
    for record in facts.input.records.iter().filter(|r| r.job == FOLLOWER.0) {
        if !record.stale() {
            figures.records += 1;
            *figures
                .by_trigger
                .entry(record.trigger().to_string())
                .or_default() += 1;
            *figures
                .by_status
                .entry(record.status().to_string())
                .or_default() += 1;
        }
        if let Some(problem) = record_problem(record, &upstream) {
            report.c.push(Violation {
                job: FOLLOWER.0.to_string(),
                tick: Some(record.tick()),
                message: format!("{problem} (run {})", record.run_id()),
                evidence: facts.evidence(FOLLOWER.0, Some(record.tick()), &[record.run_id()]),
                excuse: facts.in_state_loss(record.tick()).then_some(Excuse::Window),
            });
        }
        by_cause
            .entry(record.upstream_run_id())
            .or_default()
            .push(record);
    }
    // Cause → the follower's start lines naming it.
    let mut starts_of: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for start in facts.start_of.values().filter(|e| e.job == FOLLOWER.0) {
        figures.starts += 1;
        let cause = start.cause.as_deref().unwrap_or("");
        if !upstream.contains_key(cause) {
            report.c.push(Violation {
                job: FOLLOWER.0.to_string(),
                tick: Some(start.tick),
                message: format!(
                    "run {} started for {:?}, which is no run of {}",
                    start.run_id,
                    cause,
                    FOLLOWER_UPSTREAMS.join(" or ")
                ),
                evidence: facts.evidence(FOLLOWER.0, Some(start.tick), &[&start.run_id]),
                excuse: facts.in_state_loss(start.tick).then_some(Excuse::Window),
            });
        }
        starts_of.entry(cause).or_default().push(&start.run_id);
    }
    let mut causes: Vec<&Record> = upstream
        .values()
        .flatten()
        .copied()
        .filter(|r| !r.stale() && follower_follows(r.status()))
        .collect();
    causes.sort_by_key(|r| (r.recorded_ms(), r.id.clone()));
    for cause in causes {
        let records = by_cause.get(cause.run_id()).map_or(&[][..], Vec::as_slice);
        let starts = starts_of.get(cause.run_id()).map_or(&[][..], Vec::as_slice);
        let at = cause.recorded_ms();
        let checked = at >= facts.input.from_ms && at <= facts.input.to_ms;
        if checked {
            figures.upstream_outcomes += 1;
        }
        let (runs, reruns) = run_ids(facts, records, starts);
        let mut ids: Vec<&str> = runs.iter().chain(&reruns).copied().collect();
        ids.push(cause.run_id());
        // Redis may have forgotten the run, the inbox entry or `caused`
        // between the upstream run's start and the follower's claim: a
        // holder's finish after a wipe is current again (`restored`),
        // beside the `abandoned` a sweep recorded before it.
        let excuse = (facts.in_state_loss(at)
            || facts.state_loss_between(cause.number("started_ms"), at))
        .then_some(Excuse::Window);
        for (what, group) in [("runs", &runs), ("reruns", &reruns)] {
            if group.len() > 1 {
                if checked && what == "runs" {
                    figures.duplicated += 1;
                }
                report.d.push(Violation {
                    job: FOLLOWER.0.to_string(),
                    tick: Some(at),
                    message: format!(
                        "{} {what} ({}) for the {} outcome of {} run {}",
                        group.len(),
                        group.iter().copied().collect::<Vec<_>>().join(", "),
                        cause.status(),
                        cause.job,
                        cause.run_id()
                    ),
                    evidence: evidence(facts, cause, &ids),
                    excuse,
                });
            }
        }
        if runs.is_empty() && reruns.is_empty() && records.is_empty() {
            if checked {
                match excuse {
                    Some(_) => figures.missing_excused += 1,
                    None => figures.missing += 1,
                }
            }
            if checked {
                report.m.push(Violation {
                    job: FOLLOWER.0.to_string(),
                    tick: Some(at),
                    message: format!(
                        "no record and no start line for the {} outcome of {} run {} \
                         (recorded at {}): the follower never ran for it",
                        cause.status(),
                        cause.job,
                        cause.run_id(),
                        clock(at)
                    ),
                    evidence: evidence(facts, cause, &ids),
                    excuse,
                });
            }
        } else if checked && runs.len() == 1 {
            figures.followed += 1;
        }
        let current = |trigger: &'static str| {
            records
                .iter()
                .filter(move |r| !r.stale() && r.trigger() == trigger)
        };
        if current("rerun").next().is_some() && !current("chain").any(|r| r.status() == "abandoned")
        {
            report.c.push(Violation {
                job: FOLLOWER.0.to_string(),
                tick: Some(at),
                message: format!(
                    "a current rerun for {} run {} without an abandoned chain run",
                    cause.job,
                    cause.run_id()
                ),
                evidence: evidence(facts, cause, &ids),
                excuse,
            });
        }
    }
    report.chain = figures;
}

/// The distinct run ids of the follower's runs for one cause, from its
/// records and start lines: claimed by after.lua, and reruns.
fn run_ids<'a>(
    facts: &Facts,
    records: &[&'a Record],
    starts: &[&'a str],
) -> (BTreeSet<&'a str>, BTreeSet<&'a str>) {
    let mut runs = BTreeSet::new();
    let mut reruns = BTreeSet::new();
    let ids = records
        .iter()
        .map(|r| r.run_id())
        .chain(starts.iter().copied());
    for id in ids.filter(|id| !id.is_empty()) {
        match facts.is_rerun_run(id) {
            true => reruns.insert(id),
            false => runs.insert(id),
        };
    }
    (runs, reruns)
}

/// The cause's record, then what the follower did about it.
fn evidence(facts: &Facts, cause: &Record, ids: &[&str]) -> Vec<String> {
    let mut lines = vec![format!("cause: {}", cause.describe())];
    lines.extend(facts.evidence(FOLLOWER.0, Some(cause.recorded_ms()), ids));
    lines
}

/// What is wrong with one follower record, if anything: it must name a
/// current outcome of an upstream that starts the follower, and carry its
/// context.
fn record_problem(record: &Record, upstream: &HashMap<&str, Vec<&Record>>) -> Option<String> {
    if !matches!(record.trigger(), "chain" | "rerun") {
        return Some(format!(
            "a follower record with trigger {:?}: it has no schedule",
            record.trigger()
        ));
    }
    let cause = record.upstream_run_id();
    let Some(runs) = upstream.get(cause) else {
        return Some(format!(
            "upstream_run_id {cause:?} is no run of {}",
            FOLLOWER_UPSTREAMS.join(" or ")
        ));
    };
    let Some(current) = runs.iter().find(|r| !r.stale()) else {
        return Some(format!(
            "follows {} run {cause}, which has only stale outcomes",
            runs[0].job
        ));
    };
    let root = match current.get("root_tick") {
        "" => current.get("tick"),
        root => root,
    };
    if !follower_follows(current.status()) {
        Some(format!(
            "follows the {} of {} run {cause}, which starts nothing",
            current.status(),
            current.job
        ))
    } else if record.get("upstream_job") != current.job {
        Some(format!(
            "upstream_job {:?}, but {cause} is a run of {}",
            record.get("upstream_job"),
            current.job
        ))
    } else if record.get("upstream_status") != current.status() {
        Some(format!(
            "upstream_status {:?}, but {} run {cause} ended {}",
            record.get("upstream_status"),
            current.job,
            current.status()
        ))
    } else if record.tick() != current.recorded_ms() {
        Some(format!(
            "tick {} is not {}, when {} run {cause} was recorded",
            clock(record.tick()),
            clock(current.recorded_ms()),
            current.job
        ))
    } else if record.get("root_tick") != root {
        Some(format!(
            "root_tick {:?}, but {} run {cause} has root tick {root}",
            record.get("root_tick"),
            current.job
        ))
    } else {
        None
    }
}
