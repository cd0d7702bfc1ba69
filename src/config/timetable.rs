//! A job's `schedule` (one expression or a list), `timezone`, DST
//! policy, `active_from`, `active_until` and `max_runs`, validated into a
//! [`Timetable`] and a run limit.

use std::fmt;

use chrono::{DateTime, Utc};
use serde::de::{self, Deserializer, SeqAccess, Visitor};

use super::chain::After;
use super::checker::{Checker, Given};
use crate::schedule::{DstGap, DstPolicy, DstRepeat, Schedule, Timetable, Timing, Window, Zone};

/// The most expressions one job may list.
pub(crate) const MAX_SCHEDULES: usize = 64;

/// The largest `max_runs`.
pub(crate) const MAX_RUNS_LIMIT: i64 = 1_000_000_000;

/// `schedule` as written: one expression, or a list of them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Expressions(pub(crate) Vec<String>);

impl<'de> serde::Deserialize<'de> for Expressions {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Either;
        impl<'de> Visitor<'de> for Either {
            type Value = Expressions;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a cron expression, or a list of them")
            }
            fn visit_str<E: de::Error>(self, text: &str) -> Result<Expressions, E> {
                Ok(Expressions(vec![text.to_string()]))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Expressions, A::Error> {
                let mut each = Vec::new();
                while let Some(text) = seq.next_element::<String>()? {
                    each.push(text);
                }
                Ok(Expressions(each))
            }
        }
        deserializer.deserialize_any(Either)
    }
}

/// `active_from` or `active_until` as written: a TOML date-time (with an
/// offset, or local to the job's zone), a date (its midnight in the
/// job's zone), or the same as a string.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Moment(pub(crate) toml::Value);

impl<'de> serde::Deserialize<'de> for Moment {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        toml::Value::deserialize(deserializer).map(Moment)
    }
}

const MOMENT_FORM: &str = "expected a date-time such as 2026-12-01T00:00:00+08:00 (or without the offset, read in the job's timezone) or a date such as 2026-12-01 (its midnight in the job's timezone)";

impl Moment {
    /// An instant given by code.
    pub(crate) fn at(instant: jiff::Timestamp) -> Moment {
        Moment(toml::Value::String(instant.to_string()))
    }

    /// The instant meant, reading local forms in `zone`.
    fn instant(&self, zone: &Zone) -> Result<DateTime<Utc>, String> {
        let datetime = match &self.0 {
            toml::Value::Datetime(datetime) => *datetime,
            toml::Value::String(text) => text
                .trim()
                .parse::<toml::value::Datetime>()
                .map_err(|_| format!("{text:?} is not a date-time: {MOMENT_FORM}"))?,
            other => {
                return Err(format!(
                    "a {} is not a date-time: {MOMENT_FORM}",
                    other.type_str()
                ));
            }
        };
        let text = datetime.to_string();
        let bad = || format!("{text:?} is not a date-time: {MOMENT_FORM}");
        let timestamp = match (datetime.date, datetime.time, datetime.offset) {
            (Some(_), Some(_), Some(_)) => text.parse::<jiff::Timestamp>().map_err(|_| bad())?,
            (Some(_), Some(_), None) => text
                .parse::<jiff::civil::DateTime>()
                .ok()
                .and_then(|local| zone.tz().to_timestamp(local).ok())
                .ok_or_else(bad)?,
            (Some(_), None, None) => text
                .parse::<jiff::civil::Date>()
                .ok()
                .and_then(|date| {
                    zone.tz()
                        .to_timestamp(date.to_datetime(jiff::civil::Time::midnight()))
                        .ok()
                })
                .ok_or_else(bad)?,
            _ => return Err(format!("{text:?} has no date: {MOMENT_FORM}")),
        };
        DateTime::from_timestamp_millis(timestamp.as_millisecond()).ok_or_else(bad)
    }
}

/// A job's timing settings as given (`JobSpec::timetable`).
pub(crate) struct RawTimetable<'a> {
    pub(crate) schedule: Option<&'a Given<Expressions>>,
    pub(crate) timezone: Option<&'a Given<String>>,
    pub(crate) dst_gap: Option<&'a Given<DstGap>>,
    pub(crate) dst_repeat: Option<&'a Given<DstRepeat>>,
    pub(crate) active_from: Option<&'a Given<Moment>>,
    pub(crate) active_until: Option<&'a Given<Moment>>,
    pub(crate) max_runs: Option<&'a Given<i64>>,
}

/// `timezone` (UTC when unset), each expression of `schedule` read in it
/// with the job's DST policy, the window, and `max_runs`. The schedule is
/// not checked when the zone is invalid. A job without a schedule is valid
/// when it follows others (`after`): `Some(None)`. `None` when not valid.
pub(super) fn job_timetable(
    checker: &mut Checker<'_>,
    section: &str,
    name: &str,
    raw: &RawTimetable<'_>,
    after: Option<&After>,
) -> (Option<Option<Timetable>>, Option<u32>) {
    let max_runs = job_max_runs(checker, section, raw);
    let timezone = job_zone(checker, section, raw);
    let Some(given) = raw.schedule else {
        if after.is_none() {
            checker.problem(None, Some(section), Some("schedule"), "missing `schedule`: expected a cron expression such as \"0 12 * * *\" or \"@hourly\", a list of them, or `after = [\"job\"]` to run after other jobs".into());
            return (None, max_runs);
        }
        for (field, value) in [
            ("active_from", raw.active_from.map(Given::at)),
            ("active_until", raw.active_until.map(Given::at)),
        ] {
            if let Some(at) = value {
                checker.problem(at, Some(section), Some(field), format!("`{field}` bounds the ticks of a schedule, and the job has none (it runs after other jobs): remove `{field}`, or give it a `schedule`"));
            }
        }
        return (Some(None), max_runs);
    };
    let Some(zone) = timezone else {
        return (None, max_runs);
    };
    let schedules = job_schedules(checker, section, name, raw, given, &zone);
    let window = job_window(checker, section, raw, &zone);
    let timetable = schedules
        .zip(window)
        .and_then(|(schedules, window)| Timetable::new(schedules, window));
    (timetable.map(Some), max_runs)
}

/// `timezone`, UTC when unset; None when it names no zone.
fn job_zone(checker: &mut Checker<'_>, section: &str, raw: &RawTimetable<'_>) -> Option<Zone> {
    let Some(tz) = raw.timezone else {
        return Some(Zone::utc());
    };
    match Zone::parse(tz.get()) {
        Ok(tz) => Some(tz),
        Err(e) => {
            checker.problem(tz.at(), Some(section), Some("timezone"), e.to_string());
            None
        }
    }
}

/// Each expression of `schedule` read in `zone` with the job's DST
/// policy, each once; None when one is not valid (each problem recorded).
fn job_schedules(
    checker: &mut Checker<'_>,
    section: &str,
    name: &str,
    raw: &RawTimetable<'_>,
    given: &Given<Expressions>,
    zone: &Zone,
) -> Option<Vec<Schedule>> {
    let expressions = &given.get().0;
    if expressions.is_empty() {
        checker.problem(given.at(), Some(section), Some("schedule"), "an empty list: expected at least one cron expression, such as [\"0 12 * * 1-5\", \"0 20 * * 6\"]".into());
        return None;
    }
    if expressions.len() > MAX_SCHEDULES {
        let many = format!(
            "{} expressions: at most {MAX_SCHEDULES} per job",
            expressions.len()
        );
        checker.problem(given.at(), Some(section), Some("schedule"), many);
        return None;
    }
    let mut schedules: Vec<Schedule> = Vec::with_capacity(expressions.len());
    let mut valid = true;
    for (i, expression) in expressions.iter().enumerate() {
        let field = match expressions.len() {
            1 => "schedule".to_string(),
            _ => format!("schedule[{i}]"),
        };
        let problem = match checker.schedule(expression, zone.clone(), name, dst_policy(raw)) {
            Ok(schedule)
                if schedules
                    .iter()
                    .any(|s| s.expression() == schedule.expression()) =>
            {
                Some(format!(
                    "{:?} is listed twice: list each expression once",
                    schedule.expression()
                ))
            }
            Ok(schedule) => match check_dst_policy(checker, section, raw, schedule) {
                Some(schedule) => {
                    schedules.push(schedule);
                    None
                }
                None => {
                    valid = false;
                    None
                }
            },
            Err(e) => Some(e.to_string()),
        };
        if let Some(problem) = problem {
            checker.problem(given.at(), Some(section), Some(&field), problem);
            valid = false;
        }
    }
    valid.then_some(schedules)
}

/// The job's `dst_gap` and `dst_repeat`, defaults where unset.
pub(super) fn dst_policy(raw: &RawTimetable<'_>) -> DstPolicy {
    DstPolicy {
        gap: raw.dst_gap.map(|v| *v.get()).unwrap_or_default(),
        repeat: raw.dst_repeat.map(|v| *v.get()).unwrap_or_default(),
    }
}

/// A DST policy is for fixed-time jobs: on a wall-clock job it would do
/// nothing, which is a mistake worth naming.
fn check_dst_policy(
    checker: &mut Checker<'_>,
    section: &str,
    raw: &RawTimetable<'_>,
    schedule: Schedule,
) -> Option<Schedule> {
    if schedule.timing() == Timing::FixedTime {
        return Some(schedule);
    }
    let fields = [
        ("dst_gap", raw.dst_gap.map(Given::at)),
        ("dst_repeat", raw.dst_repeat.map(Given::at)),
    ];
    let mut valid = true;
    for (field, given) in fields {
        if let Some(at) = given {
            valid = false;
            checker.problem(
                at,
                Some(section),
                Some(field),
                format!(
                    "`{field}` applies to fixed-time jobs, and {:?} runs by the wall clock (its minute or hour field starts with `*`): local times the clock skips do not run, repeated ones run again; remove `{field}`, or give the minute and hour as numbers, lists or ranges",
                    schedule.expression()
                ),
            );
        }
    }
    valid.then_some(schedule)
}

/// `active_from` and `active_until` read in the job's zone; `until` after
/// `from`.
fn job_window(
    checker: &mut Checker<'_>,
    section: &str,
    raw: &RawTimetable<'_>,
    zone: &Zone,
) -> Option<Window> {
    let mut read = |field: &str, given: Option<&Given<Moment>>| match given {
        None => Some(None),
        Some(moment) => match moment.get().instant(zone) {
            Ok(instant) => Some(Some(instant)),
            Err(e) => {
                checker.problem(moment.at(), Some(section), Some(field), e);
                None
            }
        },
    };
    let from = read("active_from", raw.active_from);
    let until = read("active_until", raw.active_until);
    let window = Window {
        from: from?,
        until: until?,
    };
    if let (Some(from), Some(until)) = (window.from, window.until)
        && until <= from
    {
        let at = raw.active_until.and_then(Given::at);
        checker.problem(
            at,
            Some(section),
            Some("active_until"),
            format!(
                "{} is not after active_from {}: the window would hold no tick",
                until.to_rfc3339(),
                from.to_rfc3339()
            ),
        );
        return None;
    }
    Some(window)
}

/// `max_runs`: how many ticks of the schedule may start a run, in the
/// job's whole life across the cluster. `None` when unset.
fn job_max_runs(checker: &mut Checker<'_>, section: &str, raw: &RawTimetable<'_>) -> Option<u32> {
    let given = raw.max_runs?;
    if raw.schedule.is_none() {
        checker.problem(given.at(), Some(section), Some("max_runs"), "`max_runs` counts the ticks of a schedule, and the job has none (it runs after other jobs): remove `max_runs`, or give it a `schedule`".into());
        return None;
    }
    let n = checker.given_integer(section, "max_runs", Some(given), 1, 1..MAX_RUNS_LIMIT + 1);
    u32::try_from(n).ok()
}
