//! S: a run with two current outcomes (e.g. `abandoned` and its own finish
//! both current), or a tick with two current outcomes, except one rerun
//! after an `abandoned`. The follower is held to the first only: its
//! ticks are its causes' recording instants, which two causes may share;
//! two current outcomes for one cause are the chain check's D.

use super::facts::Facts;
use super::{Report, Violation};
use crate::harness::config::FOLLOWER;
use crate::records::Record;

pub fn check_s(facts: &Facts, report: &mut Report) {
    for (run_id, records) in &facts.by_run {
        let current: Vec<&&Record> = records.iter().filter(|r| !r.stale()).collect();
        if current.len() > 1 {
            let first = current[0];
            report.s.push(Violation {
                job: first.job.clone(),
                tick: Some(first.tick()),
                message: format!("run {run_id} has {} current outcomes", current.len()),
                evidence: facts.evidence(&first.job, Some(first.tick()), &[run_id]),
                excuse: (current.iter().any(|r| facts.in_state_loss(r.tick())))
                    .then_some(super::Excuse::Window),
            });
        }
    }
    for ((job, tick), records) in &facts.by_tick {
        if job == FOLLOWER.0 {
            continue;
        }
        let current: Vec<&&Record> = records.iter().filter(|r| !r.stale()).collect();
        if let Some(problem) = tick_problem(&current) {
            let ids: Vec<&str> = current.iter().map(|r| r.run_id()).collect();
            report.s.push(Violation {
                job: job.clone(),
                tick: Some(*tick),
                message: problem,
                evidence: facts.evidence(job, Some(*tick), &ids),
                excuse: facts.in_state_loss(*tick).then_some(super::Excuse::Window),
            });
        }
    }
}

/// What is wrong with a tick's current outcomes, if anything.
fn tick_problem(current: &[&&Record]) -> Option<String> {
    let (reruns, claims): (Vec<&&Record>, Vec<&&Record>) = current.iter().partition(|r| r.rerun());
    let abandoned = claims.iter().any(|r| r.status() == "abandoned");
    if claims.len() > 1 {
        Some(format!("{} current outcomes of claims", claims.len()))
    } else if reruns.len() > 1 {
        Some(format!("{} current outcomes of reruns", reruns.len()))
    } else if !reruns.is_empty() && !abandoned {
        Some("a current rerun outcome without an abandoned claim".to_string())
    } else {
        None
    }
}
