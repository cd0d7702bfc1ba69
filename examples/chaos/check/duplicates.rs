//! D: a tick started by more than one run. A rerun of an abandoned tick is
//! its own start (at-least-once by request), but a tick rerun twice is not.
//! The follower has no ticks of its own (its tick is when its cause was
//! recorded, which two causes may share): its duplicates are counted per
//! upstream outcome by the chain check (`chains`), and added to D there.

use std::collections::BTreeSet;

use super::facts::Facts;
use super::{Report, Violation};
use crate::harness::config::FOLLOWER;
use crate::records::Effect;

pub fn check_d(facts: &Facts, report: &mut Report) {
    for ((job, tick), starts) in &facts.starts {
        if job == FOLLOWER.0 {
            continue;
        }
        let (reruns, claims): (Vec<&&Effect>, Vec<&&Effect>) =
            starts.iter().partition(|e| facts.is_rerun_run(&e.run_id));
        for (what, group) in [("claimed runs", &claims), ("reruns", &reruns)] {
            if group.len() > 1 {
                let ids: Vec<&str> = group.iter().map(|e| e.run_id.as_str()).collect();
                let distinct: BTreeSet<&str> = ids.iter().copied().collect();
                report.d.push(Violation {
                    job: job.clone(),
                    tick: Some(*tick),
                    message: format!(
                        "started {} times by {what} ({} distinct run ids) on {}",
                        group.len(),
                        distinct.len(),
                        group
                            .iter()
                            .map(|e| e.replica.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                    evidence: facts.evidence(job, Some(*tick), &ids),
                    excuse: facts.in_state_loss(*tick).then_some(super::Excuse::Window),
                });
            }
        }
    }
}
