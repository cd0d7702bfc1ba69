//! Phantom claims: a replica logged `tick not claimed: Redis unreachable`
//! for a run id (its claim timed out and it gave up on the tick), yet Redis
//! holds records of that run id: the claim script ran later (e.g. when a
//! `CLIENT PAUSE` ended), took the lease, and nobody ran it: the tick ended
//! `abandoned` and its lease blocked the job's next ticks. Claims carry a
//! deadline since, and one that reaches Redis late takes no effect, so any
//! phantom is a regression of that fix; reported as information.

use super::facts::Facts;
use super::{Report, Violation};
use crate::records::Record;
use crate::wall::clock;

pub fn find_phantoms(facts: &Facts, report: &mut Report) {
    for (replica, log) in facts.input.logs {
        for line in log
            .lines()
            .filter(|l| l.contains("tick not claimed: Redis unreachable"))
        {
            let Some(run_id) = field(line, "run_id") else {
                continue;
            };
            let records = facts.records_of_run(run_id);
            let Some(claim) = records
                .iter()
                .find(|r| !matches!(r.status(), "skipped_overlap" | "excluded"))
            else {
                continue;
            };
            let (from, to) = (claim.number("started_ms"), claim.number("finished_ms"));
            let skipped: Vec<&Record> = facts
                .input
                .records
                .iter()
                .filter(|r| r.job == claim.job && r.status() == "skipped_overlap")
                .filter(|r| (from..=to).contains(&r.number("started_ms")))
                .collect();
            report.phantom_skips += skipped.len();
            let mut evidence = vec![format!("{replica}.log: {line}")];
            evidence.extend(records.iter().map(|r| r.describe()));
            evidence.extend(skipped.iter().map(|r| r.describe()));
            evidence.extend(
                facts
                    .input
                    .faults
                    .iter()
                    .filter(|f| f.end_ms >= from - 5_000 && f.start_ms <= from + 1_000)
                    .map(|f| format!("fault: {}", f.describe())),
            );
            report.phantoms.push(Violation {
                job: claim.job.clone(),
                tick: Some(claim.tick()),
                message: format!(
                    "{replica} gave up on run {run_id}, but the claim took effect at {} \
                     and ended {} at {}; {} later ticks were skipped behind it",
                    clock(from),
                    claim.status(),
                    clock(to),
                    skipped.len()
                ),
                evidence,
                excuse: Some(super::Excuse::Window),
            });
        }
    }
}

/// The value of `name=value` in a text log line.
fn field<'a>(line: &'a str, name: &str) -> Option<&'a str> {
    let key = format!(" {name}=");
    let at = line.find(&key)? + key.len();
    line[at..].split_whitespace().next()
}
