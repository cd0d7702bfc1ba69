//! L: a run that started but has no outcome record at all (the spool's
//! leftovers are shown with it), and a tick whose records are all stale
//! (no current outcome).

use super::facts::Facts;
use super::{Report, Violation};
use crate::records::Effect;

pub fn check_l(facts: &Facts, report: &mut Report) {
    let mut lost: Vec<&Effect> = facts
        .start_of
        .values()
        .copied()
        .filter(|start| facts.records_of_run(&start.run_id).is_empty())
        .collect();
    lost.sort_by_key(|e| (e.tick, e.job.clone()));
    for start in lost {
        let mut evidence = facts.evidence(&start.job, Some(start.tick), &[&start.run_id]);
        for path in facts.input.spooled {
            evidence.push(format!("still in a spool: {path}"));
        }
        report.l.push(Violation {
            job: start.job.clone(),
            tick: Some(start.tick),
            message: format!(
                "run {} started on {} but has no outcome record",
                start.run_id, start.replica
            ),
            evidence,
            excuse: (facts.in_state_loss(start.wall) || facts.in_state_loss(start.tick))
                .then_some(super::Excuse::Window),
        });
    }
    for ((job, tick), records) in &facts.by_tick {
        if records.iter().all(|r| r.stale()) {
            let ids: Vec<&str> = records.iter().map(|r| r.run_id()).collect();
            report.l.push(Violation {
                job: job.clone(),
                tick: Some(*tick),
                message: "only stale outcomes: the tick has no current outcome".to_string(),
                evidence: facts.evidence(job, Some(*tick), &ids),
                excuse: facts.in_state_loss(*tick).then_some(super::Excuse::Window),
            });
        }
    }
}
