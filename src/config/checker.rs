//! The problem collector of the config loader: turns byte spans into
//! line:column, deserializes one table at a time (dropping a failing key so
//! the next is still checked), and the small value checks every section
//! uses (durations, integers, names, redacted URLs).

use std::collections::HashMap;
use std::ops::Range;
use std::time::Duration;

use serde::Deserialize;
use serde::de::{DeserializeOwned, Deserializer};
use toml::Spanned;
use toml::de::{DeTable, DeValue, ValueDeserializer};

use super::Problem;
use crate::schedule::{DstPolicy, Schedule, ScheduleError, Zone};

/// A value of a definition and where it was written: its span in the
/// document it was read from, or none when code gave it (an embedded
/// job's [`JobBuilder`](crate::JobBuilder)). Read from TOML as a
/// [`Spanned`] value is; a problem with it is reported at its place, if it
/// has one. Compared by value alone, as `Spanned` is: a key of a table
/// is the same key wherever it was written.
#[derive(Debug, Clone)]
pub(crate) struct Given<T> {
    value: T,
    at: Option<Range<usize>>,
}

impl<T> Given<T> {
    /// A value given by code: it has no place.
    pub(crate) fn code(value: T) -> Given<T> {
        Given { value, at: None }
    }

    /// The value.
    pub(crate) fn get(&self) -> &T {
        &self.value
    }

    /// Its span in the document, if it was read from one.
    pub(crate) fn at(&self) -> Option<Range<usize>> {
        self.at.clone()
    }

    /// The value, to change in place.
    pub(crate) fn get_mut(&mut self) -> &mut T {
        &mut self.value
    }

    /// The value, its place dropped.
    pub(crate) fn into_inner(self) -> T {
        self.value
    }
}

impl<T: PartialEq> PartialEq for Given<T> {
    fn eq(&self, other: &Given<T>) -> bool {
        self.value == other.value
    }
}

impl<T: Eq> Eq for Given<T> {}

impl<T: PartialOrd> PartialOrd for Given<T> {
    fn partial_cmp(&self, other: &Given<T>) -> Option<std::cmp::Ordering> {
        self.value.partial_cmp(&other.value)
    }
}

impl<T: Ord> Ord for Given<T> {
    fn cmp(&self, other: &Given<T>) -> std::cmp::Ordering {
        self.value.cmp(&other.value)
    }
}

impl<T> From<Spanned<T>> for Given<T> {
    fn from(spanned: Spanned<T>) -> Given<T> {
        let at = Some(spanned.span());
        Given {
            value: spanned.into_inner(),
            at,
        }
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Given<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Given<T>, D::Error> {
        Spanned::<T>::deserialize(deserializer).map(Given::from)
    }
}

/// A duration setting: as written in a file, parsed when it is validated
/// (its problems quote the text), or given by code as a [`Duration`],
/// taken in whole milliseconds (its problems quote it as `"<n>ms"`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum DurationValue {
    /// The text of the file ("30s", "1h 30m").
    Written(String),
    /// A `Duration` given by code.
    Exact(Duration),
}

impl DurationValue {
    /// Whether it says zero ("0s", `Duration::ZERO`): for the settings
    /// where zero means "every time".
    pub(crate) fn is_zero(&self) -> bool {
        match self {
            DurationValue::Written(text) => {
                humantime::parse_duration(text.trim()).is_ok_and(|d| d.is_zero())
            }
            DurationValue::Exact(duration) => duration.is_zero(),
        }
    }

    /// The duration, if it is one greater than zero and at most `max`;
    /// else what is wrong, worded as [`parse_duration`] words it.
    pub(crate) fn check(&self, max: Duration) -> Result<Duration, String> {
        match self {
            DurationValue::Written(text) => parse_duration(text, max),
            DurationValue::Exact(duration) => {
                let millis = duration.as_millis();
                let text = format!("{millis}ms");
                match u64::try_from(millis) {
                    Ok(millis) => check_duration(Duration::from_millis(millis), &text, max),
                    // Too many milliseconds for a number: the text says why.
                    Err(_) => parse_duration(&text, max),
                }
            }
        }
    }
}

impl<'de> Deserialize<'de> for DurationValue {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<DurationValue, D::Error> {
        String::deserialize(deserializer).map(DurationValue::Written)
    }
}

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
    /// Whether the notification channels' secrets are read.
    pub(super) secrets: Secrets,
}

/// Whether loading a config reads the notification channels' secrets
/// (`secret_file`, `password_env`, …).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Secrets {
    /// Read, and a missing one is a problem: a config that sends.
    Read,
    /// Not read (each is left empty): the operator's commands, which send
    /// nothing and may run where the replicas' secrets are not readable.
    Skip,
}

impl<'a> Checker<'a> {
    /// A checker of `text` with no problem yet.
    pub(super) fn new(text: &'a str, secrets: Secrets) -> Checker<'a> {
        Checker {
            text,
            problems: Vec::new(),
            schedules: HashMap::new(),
            secrets,
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

    /// [`Checker::duration`] of a job's setting, written or given by code.
    pub(super) fn duration_value(
        &mut self,
        section: &str,
        field: &str,
        value: Option<&Given<DurationValue>>,
        default: Duration,
        max: Duration,
    ) -> Duration {
        let Some(value) = value else { return default };
        match value.get().check(max) {
            Ok(d) => d,
            Err(message) => {
                self.problem(value.at(), Some(section), Some(field), message);
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
        let value = value.map(|v| Given::from(v.clone()));
        self.given_integer(section, field, value.as_ref(), default, range)
    }

    /// [`Checker::integer`] of a value written or given by code.
    pub(super) fn given_integer(
        &mut self,
        section: &str,
        field: &str,
        value: Option<&Given<i64>>,
        default: i64,
        range: Range<i64>,
    ) -> i64 {
        let Some(value) = value else { return default };
        let n = *value.get();
        if range.contains(&n) {
            n
        } else {
            self.problem(
                value.at(),
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
    let d = humantime::parse_duration(text.trim())
        .map_err(|e| format!("invalid duration {text:?} ({e}): {EXPECTED_DURATION}"))?;
    check_duration(d, text, max)
}

/// What every duration problem says a duration looks like.
const EXPECTED_DURATION: &str = "expected a duration such as \"500ms\", \"30s\", \"5m\" or \"1h\"";

/// `d`, written `text`, if it is greater than zero and at most `max`.
fn check_duration(d: Duration, text: &str, max: Duration) -> Result<Duration, String> {
    if d.is_zero() {
        return Err(format!(
            "duration {text:?} is zero: {EXPECTED_DURATION}, greater than zero"
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

/// Headers of the connection and the transfer itself, which the HTTP
/// client writes: neither an HTTP job nor a webhook may give them.
pub(super) const CONNECTION_HEADERS: [&str; 11] = [
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "host",
    "content-length",
];

/// What is wrong with a header an HTTP job or a webhook gives, if
/// anything: a name that is not a token, one of `own` (lowercase: those
/// cronlease sets, and `own_why` says which) or of the connection's, or a
/// control character in its value.
pub(super) fn header_problem(
    name: &str,
    value: &str,
    own: &[&str],
    own_why: &str,
) -> Option<String> {
    let token = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c);
    let lower = name.to_ascii_lowercase();
    if name.is_empty() || !name.chars().all(token) {
        Some(format!(
            "invalid header name {name:?}: expected letters, digits and -"
        ))
    } else if own.contains(&lower.as_str()) {
        Some(format!("header {name:?} is set by cronlease {own_why}"))
    } else if CONNECTION_HEADERS.contains(&lower.as_str()) {
        Some(format!(
            "header {name:?} is set by the connection itself: expected another header, such as \"Authorization\""
        ))
    } else if value.chars().any(|c| c.is_control() && c != '\t') {
        Some(format!(
            "the value of header {name:?} holds a control character (a line break?)"
        ))
    } else {
        None
    }
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
