//! F: among current outcomes with a fence (reruns excepted: they take a new
//! fence for an old tick by design), a fence not above every fence of an
//! earlier tick. Ticks in a state-loss window are not flagged, but the
//! fences handed out before Redis lost its data still count for later ticks.

use super::facts::Facts;
use super::{Report, Violation};
use crate::harness::config::JOBS;
use crate::records::Record;
use crate::wall::rfc3339;

pub fn check_f(facts: &Facts, report: &mut Report) {
    for (job, _, _) in JOBS {
        let mut current: Vec<&Record> = facts
            .input
            .records
            .iter()
            .filter(|r| r.job == job && !r.stale() && !r.rerun() && r.fence() > 0)
            .collect();
        current.sort_by_key(|r| (r.tick(), r.fence()));
        let mut best: Option<&Record> = None; // highest fence of earlier ticks
        let mut pending: Option<&Record> = None; // highest fence of the current tick
        let mut tick = i64::MIN;
        for record in current {
            if record.tick() != tick {
                if let Some(p) = pending.take()
                    && best.is_none_or(|b| p.fence() > b.fence())
                {
                    best = Some(p);
                }
                tick = record.tick();
            }
            // Ticks in a state-loss window are not held to it, but their
            // fences count for the ticks after it.
            if let Some(b) = best
                && record.fence() <= b.fence()
            {
                let mut evidence = vec![b.describe()];
                evidence.extend(facts.evidence(job, Some(record.tick()), &[]));
                report.f.push(Violation {
                    job: job.to_string(),
                    tick: Some(record.tick()),
                    message: format!(
                        "fence {} is not above fence {} of the earlier tick {}",
                        record.fence(),
                        b.fence(),
                        rfc3339(b.tick())
                    ),
                    evidence,
                    excuse: facts
                        .in_state_loss(record.tick())
                        .then_some(super::Excuse::Window),
                });
            }
            if pending.is_none_or(|p| record.fence() > p.fence()) {
                pending = Some(record);
            }
        }
    }
}
