//! F: among current outcomes with a fence (reruns excepted: they take a new
//! fence for an old tick by design), a fence not above every fence of an
//! earlier tick. Ticks in a state-loss window are not flagged, but the
//! fences handed out before Redis lost its data still count for later ticks.
//! The follower's runs are ordered by their claim (`started_ms`, Redis
//! time) rather than by tick: its tick is its cause's recording instant,
//! and the inboxes of its two upstreams are read in no common order, so a
//! later claim may be for an earlier tick.

use super::facts::Facts;
use super::{Report, Violation};
use crate::harness::config::{FOLLOWER, all_jobs};
use crate::records::Record;
use crate::wall::rfc3339;

pub fn check_f(facts: &Facts, report: &mut Report) {
    for job in all_jobs() {
        let follower = job == FOLLOWER.0;
        // The instant a record is ordered by: its tick, or its claim.
        let at = |r: &Record| match follower {
            true => r.number("started_ms"),
            false => r.tick(),
        };
        let mut current: Vec<&Record> = facts
            .input
            .records
            .iter()
            .filter(|r| r.job == job && !r.stale() && !r.rerun() && r.fence() > 0)
            .collect();
        current.sort_by_key(|r| (at(r), r.fence()));
        let mut best: Option<&Record> = None; // highest fence of earlier ticks
        let mut pending: Option<&Record> = None; // highest fence of the current tick
        let mut tick = i64::MIN;
        for record in current {
            if at(record) != tick {
                if let Some(p) = pending.take()
                    && best.is_none_or(|b| p.fence() > b.fence())
                {
                    best = Some(p);
                }
                tick = at(record);
            }
            // Ticks in a state-loss window are not held to it, but their
            // fences count for the ticks after it.
            if let Some(b) = best
                && record.fence() <= b.fence()
            {
                let mut evidence = vec![b.describe()];
                evidence.extend(facts.evidence(job, Some(record.tick()), &[record.run_id()]));
                report.f.push(Violation {
                    job: job.to_string(),
                    tick: Some(record.tick()),
                    message: format!(
                        "fence {} is not above fence {} of the earlier {} {}",
                        record.fence(),
                        b.fence(),
                        if follower { "claim at" } else { "tick" },
                        rfc3339(at(b))
                    ),
                    evidence,
                    excuse: facts
                        .in_state_loss(at(record))
                        .then_some(super::Excuse::Window),
                });
            }
            if pending.is_none_or(|p| record.fence() > p.fence()) {
                pending = Some(record);
            }
        }
    }
}
