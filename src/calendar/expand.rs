//! A calendar's events and their occurrences. An event is a local start
//! (wall time in its zone), a length and, when it recurs, an `RRULE`
//! with `RDATE`s and `EXDATE`s. Recurrences are expanded in naive local
//! time: the `rrule` crate is handed the local wall time as if it were
//! UTC (so it never applies a zone of its own), and each local occurrence
//! is then mapped onto an instant through the event's zone with jiff,
//! from the one tz database the binary bundles. A local time the clock
//! skips or repeats maps as RFC 5545 says (jiff's `compatible`: the
//! later offset in a gap, the earlier instant in a fold), so a weekly
//! 09:00 event stays at 09:00 local on both sides of a DST change.

use chrono::{Datelike, NaiveDate, TimeZone as _, Timelike};
use jiff::civil::{Date, DateTime, Time};
use jiff::tz::TimeZone;
use jiff::{SignedDuration, Span, Timestamp};
use rrule::{Frequency, RRule, RRuleSet, Unvalidated};

/// How long an occurrence lasts: `days` local days (an all-day event,
/// `P1D`), then `exact` more.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Length {
    pub(super) days: i64,
    pub(super) exact: SignedDuration,
}

impl Length {
    pub(super) fn days(days: i64) -> Length {
        Length {
            days,
            exact: SignedDuration::ZERO,
        }
    }

    pub(super) fn exact(exact: SignedDuration) -> Length {
        Length { days: 0, exact }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.days <= 0 && self.exact <= SignedDuration::ZERO
    }
}

/// An instance left out of a recurring event (`EXDATE`, or one an
/// override replaces).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum ExDate {
    /// Every occurrence starting on that local date.
    Day(Date),
    /// The occurrence starting at that local time.
    At(DateTime),
}

/// Whether an event is whole days or has times.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    /// From midnight to midnight in the calendar's zone.
    AllDay,
    /// From a time of day, for an exact length.
    Timed,
}

/// One event of a calendar.
#[derive(Debug, Clone)]
pub(super) struct Event {
    /// The zone's name, for the content hash.
    zone_name: String,
    zone: TimeZone,
    /// The first occurrence's local start (midnight for an all-day event).
    start: DateTime,
    kind: Kind,
    length: Length,
    /// The recurrence, validated against `start` read as UTC.
    rule: Option<RRule>,
    pub(super) exdates: Vec<ExDate>,
    pub(super) rdates: Vec<DateTime>,
}

/// The most occurrences one event has in the span one window looks at;
/// at most hourly (a month: 744 or so), so never reached but by an event
/// lasting months that recurs hourly.
const MAX_OCCURRENCES: u16 = u16::MAX;

impl Event {
    pub(super) fn new(
        zone_name: String,
        zone: TimeZone,
        start: DateTime,
        kind: Kind,
        length: Length,
    ) -> Event {
        Event {
            zone_name,
            zone,
            start,
            kind,
            length,
            rule: None,
            exdates: Vec::new(),
            rdates: Vec::new(),
        }
    }

    /// An all-day event on `date` in `zone`.
    pub(super) fn day(zone_name: &str, zone: &TimeZone, date: Date) -> Event {
        Event::new(
            zone_name.to_string(),
            zone.clone(),
            date.to_datetime(Time::midnight()),
            Kind::AllDay,
            Length::days(1),
        )
    }

    /// Whether it has more than its first occurrence.
    pub(super) fn is_recurring(&self) -> bool {
        self.rule.is_some() || !self.rdates.is_empty()
    }

    /// Reads and validates the `RRULE` value `text`. Its `UNTIL` (UTC, or
    /// a date) is turned into the event's local time first, since the
    /// rule is expanded in local time.
    pub(super) fn set_rule(&mut self, text: &str) -> Result<(), String> {
        let mut parts = Vec::new();
        for part in text.trim().split(';').filter(|p| !p.is_empty()) {
            let (key, value) = part
                .split_once('=')
                .ok_or_else(|| format!("invalid part {part:?}: expected KEY=value"))?;
            if key.eq_ignore_ascii_case("UNTIL") {
                parts.push(format!("UNTIL={}", self.local_until(value)?));
            } else {
                parts.push(part.to_string());
            }
        }
        let rule: RRule<Unvalidated> = parts
            .join(";")
            .parse()
            .map_err(|e| format!("invalid rule {text:?}: {e}"))?;
        let rule = rule
            .validate(fake_utc(self.start).ok_or("DTSTART is out of range")?)
            .map_err(|e| format!("invalid rule {text:?}: {e}"))?;
        if matches!(rule.get_freq(), Frequency::Minutely | Frequency::Secondly) {
            return Err(format!(
                "FREQ={} is not supported: expected YEARLY, MONTHLY, WEEKLY, DAILY or HOURLY (list shorter events one by one)",
                rule.get_freq().to_string().to_uppercase()
            ));
        }
        self.rule = Some(rule);
        Ok(())
    }

    /// `UNTIL`'s value as the event's local time, written as if UTC.
    fn local_until(&self, value: &str) -> Result<String, String> {
        let bad = || {
            format!(
                "invalid UNTIL {value:?}: expected a date (YYYYMMDD) or a UTC date-time (YYYYMMDDTHHMMSSZ)"
            )
        };
        let local = if let Some(date) = parse_date(value) {
            // The whole last day counts.
            date.to_datetime(Time::new(23, 59, 59, 0).map_err(|_| bad())?)
        } else {
            let (text, utc) = match value.strip_suffix('Z') {
                Some(text) => (text, true),
                None => (value, false),
            };
            let (date, time) = text.split_once('T').ok_or_else(bad)?;
            let date = parse_date(date).ok_or_else(bad)?;
            let time: Time = format!(
                "{}:{}:{}",
                &time.get(0..2).ok_or_else(bad)?,
                &time.get(2..4).ok_or_else(bad)?,
                &time.get(4..6).ok_or_else(bad)?
            )
            .parse()
            .map_err(|_| bad())?;
            let at = date.to_datetime(time);
            if utc {
                let instant = at.to_zoned_datetime(TimeZone::UTC).map_err(|_| bad())?;
                instant
                    .timestamp()
                    .to_zoned_datetime(self.zone.clone())
                    .datetime()
            } else {
                at
            }
        };
        Ok(local.strftime("%Y%m%dT%H%M%SZ").to_string())
    }

    /// The local starts of the occurrences from `lo` to `hi` (inclusive),
    /// in order, without those left out.
    fn starts(&self, lo: DateTime, hi: DateTime) -> Vec<DateTime> {
        let mut starts = Vec::new();
        if let (Some(rule), Some(start), Some(after), Some(before)) =
            (&self.rule, fake_utc(self.start), fake_utc(lo), fake_utc(hi))
        {
            let set = RRuleSet::new(start)
                .rrule(rule.clone())
                .after(after)
                .before(before);
            starts.extend(
                set.all(MAX_OCCURRENCES)
                    .dates
                    .iter()
                    .filter_map(from_fake_utc),
            );
        }
        // DTSTART is always the first instance (RFC 5545), whether or not
        // the rule matches it.
        starts.push(self.start);
        starts.extend(self.rdates.iter().copied());
        starts.retain(|at| *at >= lo && *at <= hi && !self.left_out(*at));
        starts.sort_unstable();
        starts.dedup();
        starts
    }

    fn left_out(&self, at: DateTime) -> bool {
        self.exdates.iter().any(|ex| match ex {
            ExDate::Day(date) => at.date() == *date,
            ExDate::At(when) => at == *when,
        })
    }

    /// Pushes onto `out` each occurrence, as [start, end) in ms, that
    /// overlaps [`from`, `to`).
    pub(super) fn intervals(&self, from: Timestamp, to: Timestamp, out: &mut Vec<(i64, i64)>) {
        // An occurrence that starts this long before `from` may still
        // reach into it (a local day is at most 26 hours).
        let day = SignedDuration::from_hours(26);
        let reach = SignedDuration::from_hours(26 * self.length.days.max(0))
            .saturating_add(self.length.exact)
            .saturating_add(day);
        let lo = from.checked_sub(reach).unwrap_or(Timestamp::MIN);
        let hi = to.checked_add(day).unwrap_or(Timestamp::MAX);
        let (lo, hi) = (
            lo.to_zoned_datetime(self.zone.clone()).datetime(),
            hi.to_zoned_datetime(self.zone.clone()).datetime(),
        );
        for start in self.starts(lo, hi) {
            let Some((begin, end)) = self.occurrence(start) else {
                continue;
            };
            if end > from && begin < to {
                out.push((begin.as_millisecond(), end.as_millisecond()));
            }
        }
    }

    /// The instants an occurrence starting at local `start` covers.
    fn occurrence(&self, start: DateTime) -> Option<(Timestamp, Timestamp)> {
        let begin = to_instant(&self.zone, start)?;
        let end_local = start.checked_add(Span::new().days(self.length.days)).ok()?;
        let end = to_instant(&self.zone, end_local)?
            .checked_add(self.length.exact)
            .ok()?;
        Some((begin, end))
    }

    /// What the event means, for the calendar's content hash: the same
    /// text for the same occurrences, whatever the file looked like.
    pub(super) fn canonical(&self) -> String {
        let mut exdates: Vec<String> = self
            .exdates
            .iter()
            .map(|ex| match ex {
                ExDate::Day(date) => date.to_string(),
                ExDate::At(at) => at.to_string(),
            })
            .collect();
        exdates.sort();
        let mut rdates: Vec<String> = self.rdates.iter().map(|at| at.to_string()).collect();
        rdates.sort();
        format!(
            "{} {} {} {}d+{} rule={} ex={} r={}",
            self.zone_name,
            match self.kind {
                Kind::AllDay => self.start.date().to_string(),
                Kind::Timed => self.start.to_string(),
            },
            match self.kind {
                Kind::AllDay => "all-day",
                Kind::Timed => "timed",
            },
            self.length.days,
            self.length.exact,
            self.rule
                .as_ref()
                .map(|r| r.to_string())
                .unwrap_or_default(),
            exdates.join(","),
            rdates.join(","),
        )
    }
}

/// `YYYYMMDD`.
pub(super) fn parse_date(text: &str) -> Option<Date> {
    if text.len() != 8 || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let year: i16 = text[0..4].parse().ok()?;
    let month: i8 = text[4..6].parse().ok()?;
    let day: i8 = text[6..8].parse().ok()?;
    Date::new(year, month, day).ok()
}

/// The instant of local time `at` in `zone`: a time the clock skips is
/// read with the offset before the gap (so it lands after it), a time it
/// repeats is the earlier instant (RFC 5545, jiff's `compatible`).
pub(super) fn to_instant(zone: &TimeZone, at: DateTime) -> Option<Timestamp> {
    zone.to_ambiguous_timestamp(at).compatible().ok()
}

/// Local time `at` as if it were UTC, for `rrule`.
fn fake_utc(at: DateTime) -> Option<chrono::DateTime<rrule::Tz>> {
    let naive = NaiveDate::from_ymd_opt(i32::from(at.year()), at.month() as u32, at.day() as u32)?
        .and_hms_opt(at.hour() as u32, at.minute() as u32, at.second() as u32)?;
    Some(rrule::Tz::UTC.from_utc_datetime(&naive))
}

/// Back from [`fake_utc`].
fn from_fake_utc(at: &chrono::DateTime<rrule::Tz>) -> Option<DateTime> {
    let naive = at.naive_utc();
    DateTime::new(
        i16::try_from(naive.year()).ok()?,
        i8::try_from(naive.month()).ok()?,
        i8::try_from(naive.day()).ok()?,
        i8::try_from(naive.hour()).ok()?,
        i8::try_from(naive.minute()).ok()?,
        i8::try_from(naive.second()).ok()?,
        0,
    )
    .ok()
}
