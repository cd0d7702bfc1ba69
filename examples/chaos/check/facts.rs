//! What the checker knows, indexed: start and end lines by tick and by run,
//! records by tick and by run; the declared windows (state loss, Redis
//! outages); and the evidence shown with a finding.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::CheckInput;
use crate::harness::config::LEASE_MS;
use crate::records::{Effect, Record};
use crate::wall::rfc3339;

/// Ticks within this much of a Redis restart without data are a declared
/// state-loss window: lease + 2 s.
const STATE_LOSS_MARGIN_MS: i64 = LEASE_MS + 2_000;

/// Ticks this long before a Redis outage and up to this long after it may
/// be missed legitimately: the claim gives up on a tick 1 s after it, and a
/// replica needs a reconnect and a catch-up after Redis is back.
const OUTAGE_BEFORE_MS: i64 = 1_000;
const OUTAGE_AFTER_MS: i64 = 5_000;

pub struct Facts<'a> {
    pub input: &'a CheckInput<'a>,
    all: &'a [Effect],
    /// (job, tick) → start lines.
    pub starts: BTreeMap<(String, i64), Vec<&'a Effect>>,
    /// run id → its start and end lines.
    pub start_of: HashMap<String, &'a Effect>,
    pub end_of: HashMap<String, &'a Effect>,
    /// (job, tick) → records.
    pub by_tick: BTreeMap<(String, i64), Vec<&'a Record>>,
    /// run id → records.
    pub by_run: HashMap<String, Vec<&'a Record>>,
}

impl<'a> Facts<'a> {
    pub fn new(input: &'a CheckInput<'a>, all: &'a [Effect]) -> Facts<'a> {
        let mut facts = Facts {
            input,
            all,
            starts: BTreeMap::new(),
            start_of: HashMap::new(),
            end_of: HashMap::new(),
            by_tick: BTreeMap::new(),
            by_run: HashMap::new(),
        };
        for effect in all {
            if effect.start {
                facts
                    .starts
                    .entry((effect.job.clone(), effect.tick))
                    .or_default()
                    .push(effect);
                facts
                    .start_of
                    .entry(effect.run_id.clone())
                    .or_insert(effect);
            } else {
                facts.end_of.entry(effect.run_id.clone()).or_insert(effect);
            }
        }
        for record in input.records {
            facts
                .by_tick
                .entry((record.job.clone(), record.tick()))
                .or_default()
                .push(record);
            if !record.run_id().is_empty() {
                facts
                    .by_run
                    .entry(record.run_id().to_string())
                    .or_default()
                    .push(record);
            }
        }
        facts
    }

    pub fn in_state_loss(&self, ms: i64) -> bool {
        self.input.faults.iter().any(|f| {
            f.is_state_loss()
                && ms >= f.start_ms - STATE_LOSS_MARGIN_MS
                && ms <= f.end_ms + STATE_LOSS_MARGIN_MS
        })
    }

    /// Whether a state-loss window overlaps `[from_ms, to_ms]`: Redis may
    /// have forgotten what it held at `from_ms` by `to_ms`.
    pub fn state_loss_between(&self, from_ms: i64, to_ms: i64) -> bool {
        self.input.faults.iter().any(|f| {
            f.is_state_loss()
                && to_ms >= f.start_ms - STATE_LOSS_MARGIN_MS
                && from_ms <= f.end_ms + STATE_LOSS_MARGIN_MS
        })
    }

    /// A declared window in which a tick may be missed: a Redis outage (and
    /// the seconds after it), or any replica fault when there is only one
    /// replica.
    pub fn in_outage(&self, ms: i64) -> bool {
        self.input.faults.iter().any(|f| {
            (f.is_outage() || (self.input.replicas == 1 && f.target.is_some()))
                && ms >= f.start_ms - OUTAGE_BEFORE_MS
                && ms <= f.end_ms + OUTAGE_AFTER_MS
        })
    }

    pub fn records_of_run(&self, run_id: &str) -> &[&Record] {
        self.by_run.get(run_id).map_or(&[], Vec::as_slice)
    }

    pub fn is_rerun_run(&self, run_id: &str) -> bool {
        self.records_of_run(run_id).iter().any(|r| r.rerun())
    }

    /// Effect lines, records, faults nearby and replica log lines about a
    /// tick and some runs.
    pub fn evidence(&self, job: &str, tick: Option<i64>, run_ids: &[&str]) -> Vec<String> {
        let mut lines = Vec::new();
        if let Some(tick) = tick {
            for effect in self.effects_of(job, tick) {
                lines.push(format!("effects.log: {}", effect.line));
            }
            for record in self
                .by_tick
                .get(&(job.to_string(), tick))
                .into_iter()
                .flatten()
            {
                lines.push(record.describe());
            }
        }
        for run_id in run_ids {
            if let Some(start) = self.start_of.get(*run_id) {
                lines.push(format!("effects.log: {}", start.line));
            }
            if let Some(end) = self.end_of.get(*run_id) {
                lines.push(format!("effects.log: {}", end.line));
            }
            for record in self.records_of_run(run_id) {
                lines.push(record.describe());
            }
        }
        let around = tick.or_else(|| {
            run_ids
                .iter()
                .find_map(|id| self.start_of.get(*id).map(|e| e.wall))
        });
        if let Some(at) = around {
            for fault in self.input.faults {
                if fault.end_ms >= at - 8_000 && fault.start_ms <= at + 8_000 {
                    lines.push(format!("fault: {}", fault.describe()));
                }
            }
        }
        lines.extend(self.log_lines(job, tick, run_ids));
        let mut seen = BTreeSet::new();
        lines.retain(|line| seen.insert(line.clone()));
        lines
    }

    /// The replicas' log lines about the runs, or about the job's tick
    /// (at most 25 a replica; lease renewals left out).
    fn log_lines(&self, job: &str, tick: Option<i64>, run_ids: &[&str]) -> Vec<String> {
        let mut lines = Vec::new();
        let tick_text = tick.map(|t| format!("tick={}", rfc3339(t)));
        let job_field = format!("job={job} ");
        for (replica, log) in self.input.logs {
            let mut shown = 0;
            for line in log.lines() {
                let about_run = run_ids.iter().any(|id| !id.is_empty() && line.contains(id));
                let about_tick = tick_text
                    .as_ref()
                    .is_some_and(|t| line.contains(t.as_str()) && line.contains(&job_field));
                if (about_run || about_tick) && !line.contains("lease renewed") && shown < 25 {
                    lines.push(format!("{replica}.log: {line}"));
                    shown += 1;
                }
            }
        }
        lines
    }

    fn effects_of(&self, job: &str, tick: i64) -> impl Iterator<Item = &Effect> {
        self.all
            .iter()
            .filter(move |e| e.job == job && e.tick == tick)
    }
}
