//! When a job fires: a cron expression read in one IANA time zone.
//!
//! A [`Schedule`] turns the `schedule` and `timezone` of a job into instants on
//! the UTC time line. Every other module sees ticks only as those instants
//! (milliseconds since the Unix epoch in Redis), so time zones and daylight
//! saving time end here.
//!
//! Parsing and the calendar search are done by the `croner` crate (see
//! ARCHITECTURE.md for why not `cron`). This module adds what a cron daemon
//! needs on top: a clear message for each way an expression can be wrong, a
//! check that the expression can fire at all, and a single definition of "the
//! next tick" that the daemon, `check` and the tests share.
//!
//! Daylight saving time follows Vixie cron, and croner 4 already does it: a
//! fixed local time that a spring-forward gap removes fires at the first
//! instant after the gap; a fixed local time that a fall-back day repeats fires
//! once (in the earlier half); an interval job keeps its interval on the UTC
//! time line through both. The tests below pin that down.

use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use std::sync::Arc;

use croner::Cron;
use croner::parser::{CronParser, Seconds};

/// The macros a schedule may be instead of fields, with their meaning.
const MACROS: &[(&str, &str)] = &[
    ("@yearly", "0 0 1 1 *"),
    ("@annually", "0 0 1 1 *"),
    ("@monthly", "0 0 1 * *"),
    ("@weekly", "0 0 * * 0"),
    ("@daily", "0 0 * * *"),
    ("@midnight", "0 0 * * *"),
    ("@hourly", "0 * * * *"),
];

/// What a valid expression looks like, appended to every parse error.
const EXPECTED_FORM: &str = "expected 5 fields (minute hour day-of-month month day-of-week), \
     6 with leading seconds, 7 with a trailing year, or one of @yearly @monthly @weekly @daily @hourly";

/// Why an expression was rejected. The message is meant for the operator and
/// is shown after the file, line, job and field it belongs to.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ScheduleError(String);

/// A parsed cron expression bound to the time zone it is read in.
#[derive(Clone)]
pub struct Schedule {
    /// The expression as the operator wrote it, for display and hashing.
    expression: String,
    /// Shared: croner keeps a byte per possible value of each field (10 KB
    /// for the year alone), so clones of a job, and jobs with the same
    /// expression and zone (see `config`), share one parse.
    cron: Arc<Cron>,
    timezone: Tz,
}

impl fmt::Debug for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Schedule({:?} in {})", self.expression, self.timezone)
    }
}

impl PartialEq for Schedule {
    fn eq(&self, other: &Self) -> bool {
        self.expression == other.expression && self.timezone == other.timezone
    }
}

impl Schedule {
    /// Parses `expression` to be read in `timezone`, and checks that it fires
    /// at least once after `now`.
    pub fn parse(
        expression: &str,
        timezone: Tz,
        now: DateTime<Utc>,
    ) -> Result<Self, ScheduleError> {
        let trimmed = expression.trim();
        if trimmed.is_empty() {
            return Err(ScheduleError(format!("empty schedule: {EXPECTED_FORM}")));
        }
        let fields = if let Some(name) = trimmed.strip_prefix('@') {
            let lowered = trimmed.to_ascii_lowercase();
            match MACROS.iter().find(|(m, _)| *m == lowered) {
                Some((_, fields)) => (*fields).to_string(),
                None if name.eq_ignore_ascii_case("reboot") => {
                    return Err(ScheduleError(
                        "@reboot is not supported: cronlease runs ticks of a calendar, \
                         not process starts; use a systemd unit for that"
                            .to_string(),
                    ));
                }
                None => {
                    return Err(ScheduleError(format!(
                        "unknown macro {trimmed:?}: {EXPECTED_FORM}"
                    )));
                }
            }
        } else {
            let n_fields = trimmed.split_whitespace().count();
            if !(5..=7).contains(&n_fields) {
                return Err(ScheduleError(format!(
                    "{n_fields} field{} in {trimmed:?}: {EXPECTED_FORM}",
                    if n_fields == 1 { "" } else { "s" }
                )));
            }
            trimmed.to_string()
        };
        let cron = CronParser::builder()
            .seconds(Seconds::Optional)
            .build()
            .parse(&fields)
            .map_err(|e| ScheduleError(describe_parse_error(trimmed, &fields, &e)))?;
        let schedule = Schedule {
            expression: trimmed.to_string(),
            cron: Arc::new(cron),
            timezone,
        };
        if schedule.next_after(now).is_none() {
            return Err(ScheduleError(format!(
                "{trimmed:?} never fires after {}: no date matches every field",
                now.format("%Y-%m-%d")
            )));
        }
        Ok(schedule)
    }

    /// The expression as written in the config.
    pub fn expression(&self) -> &str {
        &self.expression
    }

    /// The zone the expression is read in.
    pub fn timezone(&self) -> Tz {
        self.timezone
    }

    /// The first tick strictly after `after`, or `None` if there is none
    /// (an expression whose last matching year has passed).
    pub fn next_after(&self, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let local = after.with_timezone(&self.timezone);
        self.cron
            .find_next_occurrence(&local, false)
            .ok()
            .map(|t| t.with_timezone(&Utc))
    }

    /// The next `count` ticks strictly after `after`.
    pub fn upcoming(&self, after: DateTime<Utc>, count: usize) -> Vec<DateTime<Utc>> {
        let mut ticks = Vec::with_capacity(count);
        let mut cursor = after;
        while ticks.len() < count {
            match self.next_after(cursor) {
                Some(tick) => {
                    ticks.push(tick);
                    cursor = tick;
                }
                None => break,
            }
        }
        ticks
    }
}

/// The fields of a 5-field expression: name and valid range.
const FIELDS: [(&str, u32, u32); 5] = [
    ("minute", 0, 59),
    ("hour", 0, 23),
    ("day-of-month", 1, 31),
    ("month", 1, 12),
    ("day-of-week", 0, 7),
];

/// Turns croner's error into one that names the offending field when a
/// number is out of its range, which is the common mistake.
fn describe_parse_error(written: &str, fields: &str, error: &croner::errors::CronError) -> String {
    let parts: Vec<&str> = fields.split_whitespace().collect();
    let mut named: Vec<(&str, u32, u32)> = Vec::with_capacity(7);
    if parts.len() >= 6 {
        named.push(("second", 0, 59));
    }
    named.extend(FIELDS);
    if parts.len() == 7 {
        named.push(("year", 1970, 4999));
    }
    for (part, (name, low, high)) in parts.iter().zip(named) {
        // Numbers that are values (not a step after '/', not an nth after '#').
        for item in part.split(',') {
            let value_part = item.split(['/', '#']).next().unwrap_or_default();
            for number in value_part
                .split('-')
                .filter_map(|n| n.trim_end_matches(['L', 'W']).parse::<u32>().ok())
            {
                if number < low || number > high {
                    return format!(
                        "invalid cron expression {written:?}: {name} {number} is out of range {low}-{high}"
                    );
                }
            }
        }
    }
    let detail = error.to_string();
    let detail = detail.trim_end_matches('.');
    format!("invalid cron expression {written:?} ({detail}): {EXPECTED_FORM}")
}

/// Parses an IANA time zone name, suggesting the nearest name on a typo.
pub fn parse_timezone(name: &str) -> Result<Tz, ScheduleError> {
    Tz::from_str(name).map_err(|_| {
        let nearest = chrono_tz::TZ_VARIANTS
            .iter()
            .map(|tz| (strsim::levenshtein(tz.name(), name), tz.name()))
            .min();
        let hint = match nearest {
            Some((distance, candidate)) if distance <= 3 => format!(" (did you mean {candidate:?}?)"),
            _ => String::new(),
        };
        ScheduleError(format!(
            "unknown time zone {name:?}{hint}: expected an IANA name such as \"UTC\", \"Europe/Berlin\" or \"Asia/Shanghai\""
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn at(y: i32, mo: u32, d: u32, h: u32, mi: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(y, mo, d, h, mi, 0).unwrap()
    }

    #[test]
    fn upcoming_counts_strictly_after() {
        let schedule = Schedule::parse("0 * * * *", Tz::UTC, at(2026, 1, 1, 0, 0)).unwrap();
        assert_eq!(
            schedule.upcoming(at(2026, 1, 1, 1, 0), 2),
            vec![at(2026, 1, 1, 2, 0), at(2026, 1, 1, 3, 0)]
        );
    }

    #[test]
    fn errors_name_the_problem() {
        let check = |expr: &str, fragment: &str| {
            let err = Schedule::parse(expr, Tz::UTC, at(2026, 1, 1, 0, 0)).unwrap_err();
            assert!(err.to_string().contains(fragment), "{expr}: {err}");
        };
        check("", "empty schedule");
        check("* * *", "3 fields");
        check("0 25 * * *", "hour 25 is out of range 0-23");
        check("0 0 0 * * 8", "day-of-week 8 is out of range 0-7");
        check("0 0 1 13 *", "month 13 is out of range 1-12");
        check("0 0 * * MON-FOO", "invalid cron expression");
        check("0 0 0 1 1 * 2020", "never fires after 2026-01-01");
        check("@every 5m", "unknown macro");
    }

    #[test]
    fn macros_mean_what_crontab_says() {
        let from = at(2026, 11, 21, 12, 0); // a Saturday
        let next = |expr: &str| {
            Schedule::parse(expr, Tz::UTC, from)
                .unwrap()
                .next_after(from)
                .unwrap()
        };
        assert_eq!(next("@yearly"), at(2027, 1, 1, 0, 0));
        assert_eq!(next("@monthly"), at(2026, 12, 1, 0, 0));
        assert_eq!(next("@weekly"), at(2026, 11, 22, 0, 0));
        assert_eq!(next("@daily"), at(2026, 11, 22, 0, 0));
        assert_eq!(next("@HOURLY"), at(2026, 11, 21, 13, 0));
    }

    #[test]
    fn time_zone_typos_get_a_suggestion() {
        assert!(
            parse_timezone("Europe/Berln")
                .unwrap_err()
                .to_string()
                .contains("did you mean \"Europe/Berlin\"")
        );
        assert!(
            !parse_timezone("Nowhere")
                .unwrap_err()
                .to_string()
                .contains("did you mean")
        );
    }
}
