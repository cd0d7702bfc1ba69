//! The problem collector of the config loader: turns byte spans into
//! line:column, deserializes one table at a time (dropping a failing key so
//! the next is still checked), and the small value checks every section
//! uses (durations, integers, names, redacted URLs).

use std::collections::HashMap;
use std::ops::Range;
use std::time::Duration;

use serde::de::DeserializeOwned;
use toml::Spanned;
use toml::de::{DeTable, DeValue, ValueDeserializer};

use super::Problem;
use crate::schedule::{DstPolicy, Schedule, ScheduleError, Zone};

/// What makes two jobs' schedules the same parse.
#[derive(PartialEq, Eq, Hash)]
pub(super) struct ScheduleKey {
    expression: String,
    zone: String,
    /// Only for expressions with `H`, whose values hash the job's name.
    job: Option<String>,
    dst: DstPolicy,
}

/// Collects problems for one file; knows the text, to turn spans into
/// line:column.
pub(super) struct Checker<'a> {
    pub(super) text: &'a str,
    pub(super) problems: Vec<Problem>,
    /// Schedules parsed so far, by expression, zone and DST policy (and job
    /// name, when `H` makes the job part of the meaning): jobs that share
    /// them share one parse, so a table of 10,000 jobs on a handful of
    /// expressions holds a handful of parses.
    pub(super) schedules: HashMap<ScheduleKey, Schedule>,
}

impl<'a> Checker<'a> {
    /// A checker of `text` with no problem yet.
    pub(super) fn new(text: &'a str) -> Checker<'a> {
        Checker {
            text,
            problems: Vec::new(),
            schedules: HashMap::new(),
        }
    }

    /// [`Schedule::parse`], once per distinct expression and zone.
    pub(super) fn schedule(
        &mut self,
        expression: &str,
        zone: Zone,
        job: &str,
        dst: DstPolicy,
    ) -> Result<Schedule, ScheduleError> {
        let key = ScheduleKey {
            expression: expression.to_string(),
            zone: zone.name().to_string(),
            job: expression.contains('H').then(|| job.to_string()),
            dst,
        };
        if let Some(schedule) = self.schedules.get(&key) {
            return Ok(schedule.clone());
        }
        let schedule = Schedule::parse(expression, zone, job, dst)?;
        self.schedules.insert(key, schedule.clone());
        Ok(schedule)
    }

    pub(super) fn problem(
        &mut self,
        span: Option<Range<usize>>,
        section: Option<&str>,
        field: Option<&str>,
        message: String,
    ) {
        let line_col = span.map(|s| line_col(self.text, s.start));
        self.problems.push(Problem {
            line_col,
            section: section.map(str::to_string),
            field: field.map(str::to_string),
            message,
        });
    }

    /// Deserializes one table into `T`, recording each key that fails and
    /// retrying without it, so one bad key does not hide the next.
    pub(super) fn deserialize_table<T: DeserializeOwned>(
        &mut self,
        section: &str,
        table: &Spanned<DeValue<'_>>,
    ) -> Option<T> {
        let span = table.span();
        let DeValue::Table(table) = table.get_ref() else {
            self.problem(
                Some(span),
                Some(section),
                None,
                format!("expected a table, found {}", table.get_ref().type_str()),
            );
            return None;
        };
        let mut table: DeTable<'_> = table.clone();
        // Keys dropped after failing; their problems are recorded already, so
        // what still deserializes is checked further and the config is
        // rejected all the same.
        let mut dropped: Vec<String> = Vec::new();
        loop {
            let value = Spanned::new(span.clone(), DeValue::Table(table.clone()));
            let error = match T::deserialize(ValueDeserializer::from(value)) {
                Ok(parsed) => return Some(parsed),
                Err(error) => error,
            };
            let message = error.message().trim_end_matches('\n').to_string();
            // A required key we already dropped for being invalid: reported.
            if dropped
                .iter()
                .any(|key| message.contains(&format!("missing field `{key}`")))
            {
                return None;
            }
            let culprit = error.span().and_then(|bad| {
                table
                    .iter()
                    .find(|(k, v)| contains(&k.span(), &bad) || contains(&v.span(), &bad))
                    .map(|(k, _)| k.get_ref().to_string())
            });
            let field = culprit.as_deref().or_else(|| missing_field(&message));
            self.problem(error.span(), Some(section), field, message.clone());
            match culprit {
                Some(key) => {
                    table = table
                        .into_iter()
                        .filter(|(k, _)| k.get_ref() != key.as_str())
                        .collect();
                    dropped.push(key);
                }
                None => return None,
            }
        }
    }

    pub(super) fn duration(
        &mut self,
        section: &str,
        field: &str,
        value: Option<&Spanned<String>>,
        default: Duration,
        max: Duration,
    ) -> Duration {
        let Some(value) = value else { return default };
        match parse_duration(value.get_ref(), max) {
            Ok(d) => d,
            Err(message) => {
                self.problem(Some(value.span()), Some(section), Some(field), message);
                default
            }
        }
    }

    pub(super) fn integer(
        &mut self,
        section: &str,
        field: &str,
        value: Option<&Spanned<i64>>,
        default: i64,
        range: Range<i64>,
    ) -> i64 {
        let Some(value) = value else { return default };
        let n = *value.get_ref();
        if range.contains(&n) {
            n
        } else {
            self.problem(
                Some(value.span()),
                Some(section),
                Some(field),
                format!(
                    "{n} is out of range: expected {} to {}",
                    range.start,
                    range.end - 1
                ),
            );
            default
        }
    }
}

pub(super) fn contains(outer: &Range<usize>, inner: &Range<usize>) -> bool {
    outer.start <= inner.start && inner.end <= outer.end
}

pub(super) fn missing_field(message: &str) -> Option<&str> {
    message.strip_prefix("missing field `")?.split('`').next()
}

/// 1-based line and column (in characters) of byte `offset` in `text`.
pub(super) fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    (line, before[line_start..].chars().count() + 1)
}

/// Parses "500ms", "30s", "5m", "1h", "1h 30m"; rejects zero and anything
/// above `max`.
pub fn parse_duration(text: &str, max: Duration) -> Result<Duration, String> {
    let expected = "expected a duration such as \"500ms\", \"30s\", \"5m\" or \"1h\"";
    let d = humantime::parse_duration(text.trim())
        .map_err(|e| format!("invalid duration {text:?} ({e}): {expected}"))?;
    if d.is_zero() {
        return Err(format!(
            "duration {text:?} is zero: {expected}, greater than zero"
        ));
    }
    if d > max {
        return Err(format!(
            "duration {text:?} is too long: at most {}",
            humantime::format_duration(max)
        ));
    }
    Ok(d)
}

/// `[A-Za-z0-9_.-]`, 1 to `max_len` characters.
pub(crate) fn is_name(name: &str, max_len: usize) -> bool {
    !name.is_empty()
        && name.len() <= max_len
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

/// Replaces the password (or lone user token) of a Redis URL with `***`,
/// and the value of a `pass` or `password` query parameter (a Unix
/// socket's). Everything before the URL's last `@` counts as its user
/// information, so a password holding `/`, `?` or `@` is hidden whole.
pub fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let (userinfo, rest) = match rest.rfind('@') {
        Some(at) => (Some(&rest[..at]), &rest[at..]),
        None => (None, rest),
    };
    let mut out = format!("{scheme}://");
    match userinfo.map(|u| u.split_once(':')) {
        Some(Some((user, _password))) => out.push_str(&format!("{user}:***")),
        Some(None) => out.push_str("***"),
        None => {}
    }
    match rest.split_once('?') {
        None => out.push_str(rest),
        Some((path, query)) => {
            out.push_str(path);
            out.push('?');
            let pairs: Vec<String> = query
                .split('&')
                .map(|pair| match pair.split_once('=') {
                    Some((key, _)) if matches!(key, "pass" | "password") => format!("{key}=***"),
                    _ => pair.to_string(),
                })
                .collect();
            out.push_str(&pairs.join("&"));
        }
    }
    out
}
