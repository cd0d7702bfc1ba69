//! Calendars: named sets of instants (holidays, trading days) that leave a
//! job's ticks out (`exclude`) or keep only theirs (`only`).
//!
//! A [`Calendar`] is read from an iCalendar text (RFC 5545: `ics` cuts
//! it into events) or from a list of whole days; its events are half-open
//! intervals [start, end) of instants (`expand` turns each event and its
//! recurrence into them). "Is instant T inside an event" is answered from
//! the occurrences of a window of [`WINDOW_DAYS`] days around T, expanded
//! on first use and kept for the [`WINDOWS_KEPT`] windows used last, as
//! sorted, merged intervals searched by bisection: a job ticking every
//! second asks the same window again and again, and an unbounded `RRULE`
//! is only ever expanded over one window. The calendar's content hash is
//! its events' meaning (zone, starts, lengths, rules, left-out and added
//! instances), not the file it came from: it is part of the definition
//! hash of every job that uses it, so replicas whose calendars differ
//! show as drift.

use std::collections::VecDeque;
use std::fmt;
use std::sync::{Arc, Mutex};

use jiff::Timestamp;

mod expand;
mod ics;
#[cfg(test)]
mod tests;

use crate::schedule::Zone;
use expand::Event;

/// How many days one window of expanded occurrences covers.
pub const WINDOW_DAYS: i64 = 28;

const WINDOW_MS: i64 = WINDOW_DAYS * 86_400_000;

/// How many windows of occurrences a calendar keeps.
pub const WINDOWS_KEPT: usize = 4;

/// A named set of events whose instants a job may leave out
/// ([`JobBuilder::exclude`](crate::JobBuilder::exclude)) or keep to
/// ([`JobBuilder::only`](crate::JobBuilder::only)); what a
/// `[calendars.<name>]` table of a job table defines.
///
/// An event covers the instants from its start up to, not including, its
/// end. All-day events and times without a zone are read in the
/// calendar's zone. Clones share the events and what was expanded of
/// them.
///
/// ```
/// use cronlease::Calendar;
/// use jiff::civil::date;
///
/// let holidays = Calendar::from_dates(
///     "holidays-cn",
///     [date(2026, 10, 1), date(2026, 10, 2)],
///     "Asia/Shanghai",
/// )?;
/// let noon = "2026-10-01T12:00:00+08:00".parse()?;
/// assert!(holidays.contains(noon));
/// assert!(!holidays.contains("2026-10-03T12:00:00+08:00".parse()?));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct Calendar {
    inner: Arc<Inner>,
}

/// Occurrences as merged, sorted [start, end) ms intervals.
type Intervals = Arc<[(i64, i64)]>;

struct Inner {
    name: String,
    zone: Zone,
    events: Vec<Event>,
    hash: String,
    /// The windows expanded last, the most recent first: each window's
    /// index and its merged, sorted intervals.
    windows: Mutex<VecDeque<(i64, Intervals)>>,
}

/// Why a calendar cannot be made.
///
/// ```
/// use cronlease::{Calendar, CalendarError};
///
/// let text = "BEGIN:VCALENDAR\nBEGIN:VEVENT\nDTSTART;TZID=Mars/Olympus:20261001T090000\n\
///             DURATION:PT1H\nEND:VEVENT\nEND:VCALENDAR\n";
/// let error = Calendar::from_ics("mars", text, "UTC").unwrap_err();
/// assert!(matches!(error, CalendarError::Ics { line: 3, .. }));
/// assert!(error.to_string().contains("unknown TZID \"Mars/Olympus\""));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CalendarError {
    /// The name is not 1 to 128 characters from `A-Z a-z 0-9 _ . -`.
    #[error("invalid calendar name {name:?}: expected 1 to 128 characters from A-Z a-z 0-9 _ . -")]
    Name {
        /// The name given.
        name: String,
    },
    /// The zone is not an IANA time zone name.
    #[error("{message}")]
    Zone {
        /// What is wrong, with the nearest name if there is one.
        message: String,
    },
    /// The iCalendar text is invalid, or uses what is not supported.
    #[error("line {line}: {message}")]
    Ics {
        /// The 1-based line of the text the problem is on.
        line: usize,
        /// What is wrong, and what would be valid.
        message: String,
    },
}

impl Calendar {
    /// The calendar `name` of the events of the iCalendar (RFC 5545)
    /// `text`, whose all-day events and floating times are read in
    /// `zone` (an IANA name).
    ///
    /// Each `VEVENT` is all-day (`DTSTART;VALUE=DATE`; `DTEND` is the day
    /// after its last, one day when absent) or timed (`DTSTART` in UTC
    /// with `Z`, in a `TZID`, or floating), with `DTEND` or `DURATION`;
    /// it may recur (`RRULE` from `FREQ=HOURLY` up, `RDATE`, `EXDATE`,
    /// overrides by `RECURRENCE-ID`). Cancelled events are left out.
    ///
    /// ```
    /// use cronlease::Calendar;
    ///
    /// let text = "BEGIN:VCALENDAR\r\nBEGIN:VEVENT\r\nSUMMARY:Unity Day\r\n\
    ///             DTSTART;VALUE=DATE:20261003\r\nRRULE:FREQ=YEARLY\r\nEND:VEVENT\r\n\
    ///             END:VCALENDAR\r\n";
    /// let holidays = Calendar::from_ics("holidays-de", text, "Europe/Berlin")?;
    /// assert!(holidays.contains("2030-10-03T12:00:00+02:00".parse()?));
    /// assert!(!holidays.contains("2030-10-04T00:00:00+02:00".parse()?));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn from_ics(name: &str, text: &str, zone: &str) -> Result<Calendar, CalendarError> {
        check_name(name)?;
        let zone = parse_zone(zone)?;
        let events = ics::read_events(text, &zone)?;
        Ok(Calendar::new(name, zone, events))
    }

    /// The calendar `name` of whole days `dates`, each from midnight to
    /// the next in `zone` (an IANA name).
    ///
    /// ```
    /// use cronlease::Calendar;
    /// use jiff::civil::date;
    ///
    /// let closed = Calendar::from_dates("closed", [date(2026, 12, 25)], "UTC")?;
    /// assert_eq!(closed.name(), "closed");
    /// # Ok::<(), cronlease::CalendarError>(())
    /// ```
    pub fn from_dates(
        name: &str,
        dates: impl IntoIterator<Item = jiff::civil::Date>,
        zone: &str,
    ) -> Result<Calendar, CalendarError> {
        check_name(name)?;
        let zone = parse_zone(zone)?;
        let events = dates
            .into_iter()
            .map(|date| Event::day(zone.name(), zone.tz(), date))
            .collect();
        Ok(Calendar::new(name, zone, events))
    }

    fn new(name: &str, zone: Zone, events: Vec<Event>) -> Calendar {
        let mut meaning: Vec<String> = events.iter().map(Event::canonical).collect();
        meaning.sort();
        meaning.dedup();
        let hash = fnv1a(meaning.join("\n").as_bytes());
        Calendar {
            inner: Arc::new(Inner {
                name: name.to_string(),
                zone,
                events,
                hash,
                windows: Mutex::new(VecDeque::with_capacity(WINDOWS_KEPT)),
            }),
        }
    }

    /// The calendar's name.
    ///
    /// ```
    /// use cronlease::Calendar;
    ///
    /// let none = Calendar::from_dates("none", [], "UTC")?;
    /// assert_eq!(none.name(), "none");
    /// # Ok::<(), cronlease::CalendarError>(())
    /// ```
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The zone all-day events and floating times are read in.
    pub(crate) fn zone(&self) -> &Zone {
        &self.inner.zone
    }

    /// How many events it has (a recurring one counts once).
    pub(crate) fn events(&self) -> usize {
        self.inner.events.len()
    }

    /// A hash of what the events mean (16 hex digits): two calendars with
    /// the same occurrences hash alike, whatever their files looked like.
    pub(crate) fn content_hash(&self) -> &str {
        &self.inner.hash
    }

    /// Whether `at` is inside an event of the calendar: at or after an
    /// occurrence's start and before its end.
    ///
    /// ```
    /// use cronlease::Calendar;
    /// use jiff::civil::date;
    ///
    /// let day = Calendar::from_dates("day", [date(2026, 5, 1)], "UTC")?;
    /// assert!(day.contains("2026-05-01T00:00:00Z".parse()?));
    /// assert!(!day.contains("2026-05-02T00:00:00Z".parse()?));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn contains(&self, at: Timestamp) -> bool {
        self.contains_ms(at.as_millisecond())
    }

    /// [`Calendar::contains`] for an instant in ms since the epoch.
    pub(crate) fn contains_ms(&self, at_ms: i64) -> bool {
        let intervals = self.window(at_ms.div_euclid(WINDOW_MS));
        // The last interval starting at or before `at_ms`; merged, so it
        // is the only one that can hold it.
        let after = intervals.partition_point(|(start, _)| *start <= at_ms);
        after > 0 && intervals[after - 1].1 > at_ms
    }

    /// The merged intervals of window `index`, expanded on first use.
    fn window(&self, index: i64) -> Intervals {
        // Never poisoned: nothing panics while it is held.
        let mut windows = match self.inner.windows.lock() {
            Ok(windows) => windows,
            Err(poisoned) => poisoned.into_inner(),
        };
        if let Some(at) = windows.iter().position(|(i, _)| *i == index) {
            let window = windows.remove(at).expect("the position was just found");
            windows.push_front(window.clone());
            return window.1;
        }
        let intervals = self.expand(index);
        if windows.len() == WINDOWS_KEPT {
            windows.pop_back();
        }
        windows.push_front((index, intervals.clone()));
        intervals
    }

    /// Every occurrence overlapping window `index`, merged and sorted.
    fn expand(&self, index: i64) -> Intervals {
        let from_ms = index.saturating_mul(WINDOW_MS);
        let to_ms = from_ms.saturating_add(WINDOW_MS);
        let (Ok(from), Ok(to)) = (
            Timestamp::from_millisecond(from_ms),
            Timestamp::from_millisecond(to_ms),
        ) else {
            return Arc::from(Vec::new());
        };
        let mut intervals = Vec::new();
        for event in &self.inner.events {
            event.intervals(from, to, &mut intervals);
        }
        intervals.sort_unstable();
        let mut merged: Vec<(i64, i64)> = Vec::with_capacity(intervals.len());
        for (start, end) in intervals {
            match merged.last_mut() {
                Some(last) if start <= last.1 => last.1 = last.1.max(end),
                _ => merged.push((start, end)),
            }
        }
        Arc::from(merged)
    }
}

impl PartialEq for Calendar {
    fn eq(&self, other: &Self) -> bool {
        self.inner.name == other.inner.name && self.inner.hash == other.inner.hash
    }
}

impl fmt::Debug for Calendar {
    /// The name and the content hash: what a job's definition hash takes.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Calendar")
            .field("name", &self.inner.name)
            .field("hash", &self.inner.hash)
            .finish()
    }
}

fn check_name(name: &str) -> Result<(), CalendarError> {
    if crate::config::is_name(name, 128) {
        Ok(())
    } else {
        Err(CalendarError::Name {
            name: name.to_string(),
        })
    }
}

fn parse_zone(zone: &str) -> Result<Zone, CalendarError> {
    Zone::parse(zone).map_err(|e| CalendarError::Zone {
        message: e.to_string(),
    })
}

/// FNV-1a, 16 hex digits: the same on every host and release.
fn fnv1a(bytes: &[u8]) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in bytes {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{hash:016x}")
}

/// Which of a job's settings left a tick out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[cfg_attr(feature = "dashboard", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum CalendarRule {
    /// The tick is inside an event of an `exclude` calendar.
    Exclude,
    /// The tick is inside no event of the `only` calendars.
    Only,
}

impl CalendarRule {
    /// The setting's name, as the outcome record's `calendar_rule` holds it.
    pub fn as_str(self) -> &'static str {
        match self {
            CalendarRule::Exclude => "exclude",
            CalendarRule::Only => "only",
        }
    }

    /// The rule named `text`.
    pub fn parse(text: &str) -> Option<CalendarRule> {
        match text {
            "exclude" => Some(CalendarRule::Exclude),
            "only" => Some(CalendarRule::Only),
            _ => None,
        }
    }
}

/// Why a job's calendars leave a tick out: which rule, and the calendar
/// (for `only`, the job's `only` calendars, comma-separated).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exclusion {
    pub rule: CalendarRule,
    pub calendar: String,
}

impl Exclusion {
    /// The one word form the claim and missed scripts take:
    /// `exclude <calendar>` or `only <calendars>`.
    pub fn as_arg(&self) -> String {
        format!("{} {}", self.rule.as_str(), self.calendar)
    }
}

impl fmt::Display for Exclusion {
    /// `excluded by calendar holidays-cn`, `outside calendar trading-days`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.rule {
            CalendarRule::Exclude => write!(f, "excluded by calendar {}", self.calendar),
            CalendarRule::Only if self.calendar.contains(',') => {
                write!(f, "outside calendars {}", self.calendar)
            }
            CalendarRule::Only => write!(f, "outside calendar {}", self.calendar),
        }
    }
}

/// A job's calendars: a tick inside an event of any `exclude` calendar is
/// left out, and with `only` calendars, so is a tick inside none of them
/// (any of them keeps it).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct JobCalendars {
    pub exclude: Vec<Calendar>,
    pub only: Vec<Calendar>,
}

impl JobCalendars {
    pub fn is_empty(&self) -> bool {
        self.exclude.is_empty() && self.only.is_empty()
    }

    /// Why the tick at `tick_ms` is left out, if it is: the first
    /// `exclude` calendar holding it, else the `only` calendars when none
    /// holds it.
    pub fn excluded_by(&self, tick_ms: i64) -> Option<Exclusion> {
        if let Some(calendar) = self.exclude.iter().find(|c| c.contains_ms(tick_ms)) {
            return Some(Exclusion {
                rule: CalendarRule::Exclude,
                calendar: calendar.name().to_string(),
            });
        }
        if self.only.is_empty() || self.only.iter().any(|c| c.contains_ms(tick_ms)) {
            return None;
        }
        Some(Exclusion {
            rule: CalendarRule::Only,
            calendar: self
                .only
                .iter()
                .map(Calendar::name)
                .collect::<Vec<_>>()
                .join(","),
        })
    }

    /// Every calendar, `exclude` first.
    pub fn all(&self) -> impl Iterator<Item = (CalendarRule, &Calendar)> {
        let exclude = self.exclude.iter().map(|c| (CalendarRule::Exclude, c));
        exclude.chain(self.only.iter().map(|c| (CalendarRule::Only, c)))
    }
}
