//! When a job fires: a cron expression read in one IANA time zone.
//!
//! A [`Schedule`] turns the `schedule` and `timezone` of a job into instants on
//! the UTC time line. Every other module sees ticks only as those instants
//! (milliseconds since the Unix epoch in Redis), so time zones and daylight
//! saving time end here.
//!
//! The meaning is cronie's (Vixie cron as Debian and Fedora ship it), read
//! from its source rather than from other libraries, which disagree with it
//! (ARCHITECTURE.md, "Decisions"): `expr` reads the fields (cronie's grammar,
//! its day-of-month/day-of-week rule, and the extensions the guide lists ("Schedules")),
//! `search` finds the next local time that matches and maps it onto UTC with
//! cronie's daylight-saving rules. Validity never depends on today's date: an
//! expression is refused only if it matches no date at all; one whose last
//! year has passed is valid and [`Schedule::next_after`] simply has nothing.
//!
//! `sets` holds the day-of-month, day-of-week and year value sets and how a
//! date matches them; `calendar` is the integer date arithmetic both use;
//! `words` reads a parsed expression back in plain English
//! ([`Schedule::describe`]); `timetable` is a job's ticks: the union of
//! its schedules inside its active window ([`Timetable`]). `tests.rs` holds the
//! DST and day-rule vectors, one `check(expression, zone, from, expected)`
//! helper for all of them.

mod calendar;
mod expr;
mod search;
mod sets;
mod timetable;
mod words;

use std::fmt;
use std::sync::Arc;

use chrono::{DateTime, TimeZone as _, Utc};

pub use expr::Timing;
use expr::{EXPECTED_FORM, Expr};
pub use timetable::{Timetable, Window};

/// Why an expression was rejected. The message is meant for the operator and
/// is shown after the file, line, job and field it belongs to.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ScheduleError(String);

/// What a fixed-time job does with a local time that a daylight-saving
/// change skips.
///
/// A job's `dst_gap` ([`JobBuilder::dst_gap`](crate::JobBuilder::dst_gap)),
/// default `RunAfter`, as cronie does. A job is fixed-time when neither its
/// minute nor its hour field starts with `*` (`30 2 * * *`, `@daily`);
/// other jobs follow the wall clock, and setting this on them is a config
/// error.
///
/// ```
/// use cronlease::{DstGap, JobBuilder};
///
/// // 02:30 does not exist in Berlin on the last Sunday of March.
/// let job = JobBuilder::new("close-day", "30 2 * * *")
///     .timezone("Europe/Berlin")
///     .dst_gap(DstGap::Skip);
/// assert_eq!(DstGap::default(), DstGap::RunAfter);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum DstGap {
    /// Run once at the first instant after the gap, however many of its
    /// times the gap swallowed (cronie).
    #[default]
    RunAfter,
    /// Do not run that day.
    Skip,
}

/// What a fixed-time job does with a local time that a daylight-saving
/// change repeats.
///
/// A job's `dst_repeat`
/// ([`JobBuilder::dst_repeat`](crate::JobBuilder::dst_repeat)), default
/// `First`, as cronie does. Fixed-time jobs only, as for [`DstGap`].
///
/// ```
/// use cronlease::{DstRepeat, JobBuilder};
///
/// // 01:30 happens twice in New York on the first Sunday of November.
/// let job = JobBuilder::new("meter-reading", "30 1 * * *")
///     .timezone("America/New_York")
///     .dst_repeat(DstRepeat::Both);
/// assert_eq!(DstRepeat::default(), DstRepeat::First);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum DstRepeat {
    /// Run at the first occurrence only (cronie).
    #[default]
    First,
    /// Run at both occurrences.
    Both,
}

enum_names!(DstGap { RunAfter => "run_after", Skip => "skip" });
enum_names!(DstRepeat { First => "first", Both => "both" });

/// A fixed-time job's daylight-saving policy (`dst_gap`, `dst_repeat`).
/// Wall-clock jobs have none: the default is cronie's behaviour.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct DstPolicy {
    pub gap: DstGap,
    pub repeat: DstRepeat,
}

/// An IANA time zone from the tz database compiled into the binary (so every
/// replica of one release computes the same instants, whatever the host's
/// `/usr/share/zoneinfo` holds). Its rules run past 2037 and 2099.
#[derive(Clone)]
pub struct Zone {
    /// The canonical name (`America/New_York` for `america/new_york`).
    name: Arc<str>,
    tz: jiff::tz::TimeZone,
}

impl Zone {
    /// UTC, the zone of a job that names none.
    pub fn utc() -> Zone {
        Zone {
            name: Arc::from("UTC"),
            tz: jiff::tz::TimeZone::UTC,
        }
    }

    /// Looks up an IANA name, suggesting the nearest name on a typo.
    pub fn parse(name: &str) -> Result<Zone, ScheduleError> {
        match jiff::tz::TimeZone::get(name) {
            Ok(tz) => {
                let canonical = tz.iana_name().unwrap_or(name).to_string();
                Ok(Zone {
                    name: Arc::from(canonical),
                    tz,
                })
            }
            Err(_) => {
                let nearest = jiff::tz::db()
                    .available()
                    .map(|candidate| {
                        let candidate = candidate.as_str().to_string();
                        (strsim::levenshtein(&candidate, name), candidate)
                    })
                    .min();
                let hint = match nearest {
                    Some((distance, candidate)) if distance <= 3 => {
                        format!(" (did you mean {candidate:?}?)")
                    }
                    _ => String::new(),
                };
                Err(ScheduleError(format!(
                    "unknown time zone {name:?}{hint}: expected an IANA name such as \"UTC\", \"Europe/Berlin\" or \"Asia/Shanghai\""
                )))
            }
        }
    }

    /// The canonical IANA name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The zone itself, from jiff's bundled tz database.
    pub(crate) fn tz(&self) -> &jiff::tz::TimeZone {
        &self.tz
    }

    /// `tick` as local time: `2026-03-29 03:00:00 +02:00 Sun`.
    pub fn format_local(&self, tick: DateTime<Utc>) -> String {
        match jiff::Timestamp::from_second(tick.timestamp()) {
            Ok(timestamp) => timestamp
                .to_zoned_datetime(self.tz.clone())
                .strftime("%Y-%m-%d %H:%M:%S %:z %a")
                .to_string(),
            Err(_) => tick.to_rfc3339(),
        }
    }
}

impl PartialEq for Zone {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
    }
}

impl Eq for Zone {}

impl fmt::Debug for Zone {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)
    }
}

/// A parsed cron expression bound to the time zone it is read in.
#[derive(Clone)]
pub struct Schedule {
    /// The expression as the operator wrote it, for display and hashing.
    expression: String,
    /// Shared: clones of a job, and jobs with the same resolved expression,
    /// zone and policy (see `config`), share one parse.
    expr: Arc<Expr>,
    zone: Zone,
    dst: DstPolicy,
}

impl fmt::Debug for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The form `Job::definition_hash` hashes: unchanged for the default
        // policy, so replicas of this and the previous release agree.
        write!(f, "Schedule({:?} in {}", self.expression, self.zone.name())?;
        if self.dst != DstPolicy::default() {
            write!(
                f,
                ", dst_gap {}, dst_repeat {}",
                self.dst.gap.as_str(),
                self.dst.repeat.as_str()
            )?;
        }
        f.write_str(")")
    }
}

impl PartialEq for Schedule {
    fn eq(&self, other: &Self) -> bool {
        self.expression == other.expression
            && self.expr.resolved == other.expr.resolved
            && self.zone == other.zone
            && self.dst == other.dst
    }
}

impl Schedule {
    /// Parses `expression` for the job named `job` (which seeds `H`), to be
    /// read in `zone` with the DST policy `dst`. Refuses an expression that
    /// matches no date at all; whether it still fires after today is
    /// [`Schedule::next_after`]'s business, not validity's.
    pub fn parse(
        expression: &str,
        zone: Zone,
        job: &str,
        dst: DstPolicy,
    ) -> Result<Self, ScheduleError> {
        let trimmed = expression.trim();
        if trimmed.is_empty() {
            return Err(ScheduleError(format!("empty schedule: {EXPECTED_FORM}")));
        }
        let expr = expr::parse(trimmed, job).map_err(ScheduleError)?;
        if search::next_local(&expr, i64::MIN).is_none() {
            return Err(ScheduleError(format!(
                "{trimmed:?} never fires: no date matches its day-of-month, month, day-of-week and year together{}",
                expr::why_no_date(&expr)
            )));
        }
        Ok(Schedule {
            expression: trimmed.to_string(),
            expr: Arc::new(expr),
            zone,
            dst,
        })
    }

    /// The expression as written in the config.
    pub fn expression(&self) -> &str {
        &self.expression
    }

    /// The expression with every `H` replaced by the values it picked for
    /// this job (the expression itself when it has no `H`).
    pub fn resolved(&self) -> &str {
        &self.expr.resolved
    }

    /// The zone the expression is read in.
    pub fn timezone(&self) -> &Zone {
        &self.zone
    }

    /// Fixed-time or wall-clock, by cronie's rule.
    pub fn timing(&self) -> Timing {
        self.expr.timing
    }

    /// The DST policy (meaningful for fixed-time jobs only).
    pub fn dst(&self) -> DstPolicy {
        self.dst
    }

    /// The last year the year field allows, if it limits the years.
    pub fn last_year(&self) -> Option<u32> {
        self.expr.years.last()
    }

    /// The first tick strictly after `after`, or `None` if there is none
    /// (an expression whose last matching year has passed).
    pub fn next_after(&self, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let tick = search::next_after(&self.expr, &self.zone, self.dst, after.timestamp())?;
        Utc.timestamp_opt(tick, 0).single()
    }

    /// The next `count` ticks strictly after `after`.
    #[cfg(any(test, feature = "internals"))]
    pub fn upcoming(&self, after: DateTime<Utc>, count: usize) -> Vec<DateTime<Utc>> {
        successive(|t| self.next_after(t), after, count)
    }
}

/// The first `count` instants of `next` from `after` on, each strictly
/// after the one before (fewer when `next` runs out).
fn successive(
    next: impl Fn(DateTime<Utc>) -> Option<DateTime<Utc>>,
    after: DateTime<Utc>,
    count: usize,
) -> Vec<DateTime<Utc>> {
    let mut ticks = Vec::with_capacity(count.min(1024));
    let mut cursor = after;
    while ticks.len() < count {
        let Some(tick) = next(cursor) else { break };
        ticks.push(tick);
        cursor = tick;
    }
    ticks
}

#[cfg(test)]
mod tests;
