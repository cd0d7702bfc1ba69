//! M: a tick in the checked range without any trace: no start line and no
//! outcome record (not even `missed` or `skipped_overlap`). Excused inside
//! a Redis outage or a state-loss window. A tick with an outcome such as
//! `abandoned` but no start line is listed as information, not as M.

use super::facts::Facts;
use super::{Report, Violation};
use crate::harness::config::JOBS;
use crate::records::Record;
use crate::wall::rfc3339;

pub fn check_m(facts: &Facts, report: &mut Report) {
    let input = facts.input;
    for (job, _, _) in JOBS {
        let mut tick = input.from_ms;
        while tick <= input.to_ms {
            report.ticks_checked += 1;
            if facts.in_state_loss(tick) {
                report.state_loss_ticks += 1;
            }
            let key = (job.to_string(), tick);
            let started = facts.starts.contains_key(&key);
            let records = facts.by_tick.get(&key).map_or(&[][..], Vec::as_slice);
            if !started && records.is_empty() {
                report.m.push(Violation {
                    job: job.to_string(),
                    tick: Some(tick),
                    message: "no start line and no outcome record: the tick was silently missed"
                        .to_string(),
                    evidence: facts.evidence(job, Some(tick), &[]),
                    excuse: (facts.in_outage(tick) || facts.in_state_loss(tick))
                        .then_some(super::Excuse::Window),
                });
            } else if !started
                && records.iter().any(|r| {
                    !matches!(
                        r.status(),
                        "missed" | "skipped_overlap" | "excluded" | "skipped_capacity"
                    )
                })
            {
                report
                    .claimed_not_started
                    .push(claimed_not_started(job, tick, records));
            }
            tick += 1_000;
        }
    }
}

/// The information line of a tick with outcomes but no start line.
fn claimed_not_started(job: &str, tick: i64, records: &[&Record]) -> String {
    let shown: Vec<String> = records
        .iter()
        .map(|r| {
            format!(
                "{} by {} (stale={})",
                r.status(),
                r.get("replica"),
                r.get("stale")
            )
        })
        .collect();
    format!("{job} {}: {}", rfc3339(tick), shown.join("; "))
}
