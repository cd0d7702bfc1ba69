//! N: what the webhook sink received against what the outcome records call
//! for. The events are derived per job from its current outcome records in
//! the order Redis recorded them (their stream ids), with the rules the
//! scripts apply: a `failed`, `timeout`, `lost_lease` or `abandoned`
//! outcome starts or extends a failing streak; the first is told under its
//! status, and each later one under its own once `repeat_every` (zero, see
//! `REPEAT_EVERY_MS`: every one) has passed since the last told; the first `ok` after a
//! streak is told `recovered`; every other status tells nothing and leaves
//! the streak as it is; one call of the missed-ticks script (its records
//! share `recorded_by` and `started_ms`) is one `missed` event for its
//! first tick. A run's event is matched by (event, job, run id), a
//! `missed` event by (job, first tick).
//!
//! Counted: an expected event that never arrived; one event under two keys;
//! a key that arrived twice when no replica was killed or frozen (the
//! delivery promise is exactly once then); a delivery no outcome calls for;
//! a key that is not the body's or not `cronlease-<job>-…`; a failure told
//! as the first of a streak when it was not, or the other way round.
//! Excused: what a state-loss window (Redis wiped) may explain, as for the
//! other properties; a `recovered` or a failure's place in its streak when
//! a state-loss window lies between the streak's start and the event (the
//! streak lives in the job's state hash); events recorded after the wait
//! for deliveries began (they may still be on their way at the shutdown).

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Value, json};

use super::facts::Facts;
use super::{Excuse, Report, Violation};
use crate::faults::FaultKind;
use crate::harness::config::{REPEAT_EVERY_MS, all_jobs};
use crate::records::Record;
use crate::sink::{Delivery, parse_deliveries};

/// The statuses that start or extend a failing streak.
const FAILING: [&str; 4] = ["failed", "timeout", "lost_lease", "abandoned"];

/// What identifies one event: (event, job, run id or first tick).
type Identity = (String, String, String);

/// Figures of one kind of event.
#[derive(Debug, Default, Clone)]
pub struct KindFigures {
    /// Events the outcome records call for.
    pub expected: usize,
    /// Of those, delivered at least once.
    pub delivered: usize,
    /// Not delivered, and counted.
    pub missing: usize,
    /// Not delivered, excused (state-loss window, a streak across one, or
    /// recorded after the wait for deliveries began).
    pub excused: usize,
    /// Deliveries beyond the first of an event.
    pub duplicates: usize,
    /// Deliveries of an event no outcome calls for.
    pub unexpected: usize,
}

impl KindFigures {
    pub fn to_json(&self) -> Value {
        json!({"expected": self.expected, "delivered": self.delivered,
               "missing": self.missing, "missing_excused": self.excused,
               "duplicates": self.duplicates, "unexpected": self.unexpected})
    }
}

/// The notification side of the report.
#[derive(Debug, Default)]
pub struct Notifications {
    /// Whether the run had a webhook sink (an older output directory may not).
    pub checked: bool,
    pub deliveries: usize,
    pub keys: usize,
    /// Whether a replica was killed or frozen, which lets a key arrive twice.
    pub repeats_allowed: bool,
    pub by_kind: BTreeMap<String, KindFigures>,
}

/// Whether one key may arrive twice: only when a replica died or stalled
/// between sending and acknowledging.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Repeats {
    Allowed,
    Forbidden,
}

/// One event the records call for.
struct Expected<'a> {
    identity: Identity,
    record: &'a Record,
    /// When its outcome was recorded (its stream id), Redis ms.
    at_ms: i64,
    tick: i64,
    /// A `recovered` whose streak crossed a state-loss window.
    uncertain: bool,
    /// A failure's place in its streak (1: the first), when no state-loss
    /// window lies between the streak's start and it.
    place: Option<usize>,
}

impl Expected<'_> {
    fn kind(&self) -> &str {
        &self.identity.0
    }
}

/// The failing streak the checker follows, as the job's state hash holds it.
struct Streak {
    since_ms: i64,
    /// When its last told failure was recorded.
    told_ms: i64,
    count: usize,
    crossed_state_loss: bool,
}

pub fn check_n(facts: &Facts, report: &mut Report) {
    let Some(text) = facts.input.notifications_text else {
        return;
    };
    let deliveries = parse_deliveries(text, &mut report.warnings);
    let mut summary = Notifications {
        checked: true,
        deliveries: deliveries.len(),
        keys: deliveries
            .iter()
            .map(|d| d.key.as_str())
            .collect::<BTreeSet<_>>()
            .len(),
        repeats_allowed: facts.input.faults.iter().any(|f| {
            matches!(
                f.kind,
                FaultKind::Kill9 | FaultKind::Sigstop | FaultKind::UnexpectedExit
            )
        }),
        by_kind: BTreeMap::new(),
    };
    let repeats = match summary.repeats_allowed {
        true => Repeats::Allowed,
        false => Repeats::Forbidden,
    };
    let mut groups: BTreeMap<Identity, Vec<&Delivery>> = BTreeMap::new();
    for delivery in &deliveries {
        check_key(delivery, report);
        groups
            .entry(identity_of(delivery))
            .or_default()
            .push(delivery);
    }
    for expected in expected_events(facts) {
        let figures = summary
            .by_kind
            .entry(expected.kind().to_string())
            .or_default();
        figures.expected += 1;
        match groups.remove(&expected.identity) {
            Some(group) => {
                figures.delivered += 1;
                figures.duplicates += group.len() - 1;
                check_copies(facts, &group, repeats, report);
                check_place(facts, &expected, group[0], report);
            }
            None => {
                let violation = missing(facts, &expected);
                if violation.excused() {
                    figures.excused += 1;
                } else {
                    figures.missing += 1;
                    report.n.push(violation);
                }
            }
        }
    }
    for ((kind, _, _), group) in groups {
        let figures = summary.by_kind.entry(kind).or_default();
        figures.unexpected += 1;
        figures.duplicates += group.len() - 1;
        check_copies(facts, &group, repeats, report);
        report.n.push(unexpected(facts, &group));
    }
    report.notifications = summary;
}

/// The events every job's current records call for.
fn expected_events<'a>(facts: &Facts<'a>) -> Vec<Expected<'a>> {
    let mut expected = Vec::new();
    for job in all_jobs() {
        let mut current: Vec<&Record> = facts
            .input
            .records
            .iter()
            .filter(|r| r.job == job && !r.stale())
            .collect();
        current.sort_by_key(|r| stream_id(&r.id));
        expected.extend(run_events(facts, job, &current));
        expected.extend(missed_events(job, &current));
    }
    expected
}

/// Failures, by their own status, and `recovered`, in recording order.
fn run_events<'a>(facts: &Facts, job: &str, current: &[&'a Record]) -> Vec<Expected<'a>> {
    let mut events = Vec::new();
    let mut streak: Option<Streak> = None;
    for record in current {
        let at_ms = stream_id(&record.id).0;
        if let Some(streak) = &mut streak
            && facts.state_loss_between(streak.since_ms, at_ms)
        {
            streak.crossed_state_loss = true;
        }
        let status = record.status();
        let event = |kind: &str, place: Option<usize>| Expected {
            identity: (
                kind.to_string(),
                job.to_string(),
                record.run_id().to_string(),
            ),
            record,
            at_ms,
            tick: record.tick(),
            uncertain: false,
            place,
        };
        if FAILING.contains(&status) {
            let streak = streak.get_or_insert(Streak {
                since_ms: at_ms,
                told_ms: at_ms - REPEAT_EVERY_MS,
                count: 0,
                crossed_state_loss: false,
            });
            streak.count += 1;
            if at_ms - streak.told_ms >= REPEAT_EVERY_MS {
                streak.told_ms = at_ms;
                let place = (!streak.crossed_state_loss).then_some(streak.count);
                events.push(event(status, place));
            }
        } else if status == "ok"
            && let Some(ended) = streak.take()
        {
            events.push(Expected {
                uncertain: ended.crossed_state_loss,
                ..event("recovered", None)
            });
        }
    }
    events
}

/// One `missed` event per call of the missed-ticks script, for its first tick.
fn missed_events<'a>(job: &str, current: &[&'a Record]) -> Vec<Expected<'a>> {
    let mut calls: BTreeMap<(&str, i64), &Record> = BTreeMap::new();
    for record in current.iter().filter(|r| r.status() == "missed") {
        let call = (record.get("recorded_by"), record.number("started_ms"));
        let first = calls.entry(call).or_insert(record);
        if record.tick() < first.tick() {
            *first = record;
        }
    }
    calls
        .into_values()
        .map(|record| Expected {
            identity: (
                "missed".to_string(),
                job.to_string(),
                record.tick().to_string(),
            ),
            record,
            at_ms: stream_id(&record.id).0,
            tick: record.tick(),
            uncertain: false,
            place: None,
        })
        .collect()
}

fn identity_of(delivery: &Delivery) -> Identity {
    let which = match delivery.event() {
        "missed" => delivery
            .tick_ms()
            .map_or_else(|| delivery.text("tick").to_string(), |t| t.to_string()),
        _ => delivery.run_id().to_string(),
    };
    (
        delivery.event().to_string(),
        delivery.job().to_string(),
        which,
    )
}

/// `ms-seq` of a stream id, for ordering.
fn stream_id(id: &str) -> (i64, i64) {
    let (ms, seq) = id.split_once('-').unwrap_or((id, "0"));
    (ms.parse().unwrap_or(0), seq.parse().unwrap_or(0))
}

/// The header's key is the body's, and names the job's stream.
fn check_key(delivery: &Delivery, report: &mut Report) {
    let prefix = format!("cronlease-{}-", delivery.job());
    if delivery.key == delivery.text("idempotency_key") && delivery.key.starts_with(&prefix) {
        return;
    }
    report.n.push(Violation {
        job: delivery.job().to_string(),
        tick: delivery.tick_ms(),
        message: format!(
            "Idempotency-Key {:?} is not the body's {:?} or does not start with {prefix:?}",
            delivery.key,
            delivery.text("idempotency_key")
        ),
        evidence: vec![delivery.describe()],
        excuse: None,
    });
}

/// Copies of one event: under one key (a repeat, allowed only when a
/// replica was killed or frozen), never under two.
fn check_copies(facts: &Facts, group: &[&Delivery], repeats: Repeats, report: &mut Report) {
    let first = group[0];
    let tick = first.tick_ms();
    let in_window =
        tick.is_some_and(|t| facts.in_state_loss(t)) || facts.in_state_loss(first.occurred_ms());
    let keys: BTreeSet<&str> = group.iter().map(|d| d.key.as_str()).collect();
    let evidence = || group.iter().map(|d| d.describe()).collect::<Vec<_>>();
    if keys.len() > 1 {
        report.n.push(Violation {
            job: first.job().to_string(),
            tick,
            message: format!(
                "{} event delivered under {} different keys",
                first.event(),
                keys.len()
            ),
            evidence: evidence(),
            excuse: in_window.then_some(Excuse::Window),
        });
    }
    if keys.len() < group.len() && repeats == Repeats::Forbidden {
        report.n.push(Violation {
            job: first.job().to_string(),
            tick,
            message: format!(
                "{} event delivered {} times with the same key, and no replica was killed or \
                 frozen",
                first.event(),
                group.len()
            ),
            evidence: evidence(),
            excuse: in_window.then_some(Excuse::Window),
        });
    }
}

/// A failure's place in its streak, as the delivered detail tells it.
fn check_place(facts: &Facts, expected: &Expected, delivery: &Delivery, report: &mut Report) {
    let Some(place) = expected.place else {
        return;
    };
    let detail = delivery.text("detail");
    let told_right = match place {
        1 => !detail.contains("still failing"),
        n => detail.contains(&format!("still failing: {n} failures in a row")),
    };
    if told_right {
        return;
    }
    let mut evidence = vec![expected.record.describe(), delivery.describe()];
    evidence.extend(facts.evidence(&expected.identity.1, Some(expected.tick), &[]));
    report.n.push(Violation {
        job: expected.identity.1.clone(),
        tick: Some(expected.tick),
        message: format!(
            "{} told as if it were not failure {place} of its streak: {detail:?}",
            expected.kind()
        ),
        evidence,
        excuse: None,
    });
}

/// An expected event the sink never got (excused or not).
fn missing(facts: &Facts, expected: &Expected) -> Violation {
    let excuse = (expected.uncertain
        || expected.at_ms > facts.input.settle_from_ms
        || facts.in_state_loss(expected.at_ms)
        || facts.in_state_loss(expected.tick))
    .then_some(Excuse::Window);
    let run_id = expected.record.run_id();
    let mut evidence = vec![format!(
        "expected {} for {} (recorded at {})",
        expected.kind(),
        expected.record.describe(),
        crate::wall::clock(expected.at_ms)
    )];
    evidence.extend(facts.evidence(&expected.identity.1, Some(expected.tick), &[run_id]));
    Violation {
        job: expected.identity.1.clone(),
        tick: Some(expected.tick),
        message: format!(
            "{} event never delivered (run {})",
            expected.kind(),
            if run_id.is_empty() { "-" } else { run_id }
        ),
        evidence,
        excuse,
    }
}

/// A delivered event no current outcome calls for.
fn unexpected(facts: &Facts, group: &[&Delivery]) -> Violation {
    let first = group[0];
    let tick = first.tick_ms();
    let in_window =
        tick.is_some_and(|t| facts.in_state_loss(t)) || facts.in_state_loss(first.occurred_ms());
    let mut evidence: Vec<String> = group.iter().map(|d| d.describe()).collect();
    let run_id = first.run_id();
    evidence.extend(facts.evidence(first.job(), tick, &[run_id]));
    Violation {
        job: first.job().to_string(),
        tick,
        message: format!(
            "{} delivered, but no current outcome calls for it",
            first.event()
        ),
        evidence,
        excuse: in_window.then_some(Excuse::Window),
    }
}
