//! An iCalendar (RFC 5545) text read into the events of a calendar: its
//! content lines unfolded and cut (`NAME;PARAM=value:value`, each with the
//! line it starts on, for messages), its `VEVENT`s' `DTSTART`, `DTEND`,
//! `DURATION`, `RRULE`, `EXDATE`, `RDATE`, `STATUS` and `RECURRENCE-ID`
//! read into [`Event`]s. What is not supported is refused by name and
//! line; properties that say nothing of when an event is (`SUMMARY`,
//! `UID` but for overrides, …) and other components (`VTIMEZONE`,
//! `VTODO`, `VALARM`) are skipped: zones are the IANA names of `TZID`,
//! read from the bundled tz database.

use std::collections::BTreeMap;

use jiff::civil::{Date, DateTime};
use jiff::tz::TimeZone;
use jiff::{SignedDuration, Timestamp};

use super::CalendarError;
use super::expand::{Event, ExDate, Kind, Length, parse_date};
use crate::schedule::Zone;

/// One logical line: its name (upper case), parameters and value, and
/// the physical line it starts on.
struct Line {
    number: usize,
    name: String,
    params: Vec<(String, String)>,
    value: String,
}

impl Line {
    fn param(&self, name: &str) -> Option<&str> {
        self.params
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    fn error(&self, message: impl std::fmt::Display) -> CalendarError {
        CalendarError::Ics {
            line: self.number,
            message: format!("{}: {message}", self.name),
        }
    }
}

/// The events of the iCalendar `text`, whose floating times and dates are
/// read in `zone`.
pub(super) fn read_events(text: &str, zone: &Zone) -> Result<Vec<Event>, CalendarError> {
    let raw_events = vevents(content_lines(text)?)?;
    let mut events = Vec::new();
    // Overrides of one instance (`RECURRENCE-ID`) by UID: the instance
    // they replace is taken out of the recurring event.
    let mut overridden: BTreeMap<String, Vec<ExDate>> = BTreeMap::new();
    let mut uids = Vec::new();
    for (at, lines) in raw_events {
        let Some(read) = read_event(at, &lines, zone)? else {
            continue;
        };
        if let Some((uid, instance)) = read.replaces {
            overridden.entry(uid).or_default().push(instance);
        }
        uids.push(read.uid);
        events.push(read.event);
    }
    for (event, uid) in events.iter_mut().zip(uids) {
        if event.is_recurring()
            && let Some(instances) = uid.and_then(|uid| overridden.get(&uid))
        {
            event.exdates.extend(instances.iter().cloned());
        }
    }
    Ok(events)
}

/// The properties of each `VEVENT` of `lines` (not those of an alarm in
/// it), with the line it begins on; components checked to pair up.
fn vevents(lines: Vec<Line>) -> Result<Vec<(usize, Vec<Line>)>, CalendarError> {
    let mut stack: Vec<(String, usize)> = Vec::new();
    let mut calendars = 0;
    let mut event: Vec<Line> = Vec::new();
    let mut raw_events: Vec<(usize, Vec<Line>)> = Vec::new();
    for line in lines {
        match line.name.as_str() {
            "BEGIN" => {
                let component = line.value.to_ascii_uppercase();
                if stack.is_empty() && component != "VCALENDAR" {
                    return Err(line.error(format!(
                        "{component} outside a calendar: expected BEGIN:VCALENDAR first"
                    )));
                }
                calendars += usize::from(component == "VCALENDAR");
                if component == "VEVENT" {
                    event.clear();
                }
                stack.push((component, line.number));
            }
            "END" => {
                let component = line.value.to_ascii_uppercase();
                let at = match stack.pop() {
                    Some((open, at)) if open == component => at,
                    Some((open, at)) => {
                        return Err(line.error(format!(
                            "END:{component} closes BEGIN:{open} of line {at}: expected END:{open}"
                        )));
                    }
                    None => return Err(line.error("END without BEGIN")),
                };
                if component == "VEVENT" {
                    raw_events.push((at, std::mem::take(&mut event)));
                }
            }
            _ => match stack.last() {
                Some((component, _)) if component == "VEVENT" => event.push(line),
                Some(_) => {}
                None => {
                    return Err(
                        line.error("a property outside a calendar: expected BEGIN:VCALENDAR first")
                    );
                }
            },
        }
    }
    if let Some((open, at)) = stack.pop() {
        return Err(CalendarError::Ics {
            line: at,
            message: format!("BEGIN:{open} is never closed: expected END:{open}"),
        });
    }
    if calendars == 0 {
        return Err(CalendarError::Ics {
            line: 1,
            message: "not an iCalendar file: expected BEGIN:VCALENDAR".into(),
        });
    }
    Ok(raw_events)
}

/// A `VEVENT` read: the event, its UID, and the instance of another
/// event it replaces (`RECURRENCE-ID`).
struct ReadEvent {
    event: Event,
    uid: Option<String>,
    replaces: Option<(String, ExDate)>,
}

/// The event of the `VEVENT` starting at line `at`; None when it is
/// cancelled (`STATUS:CANCELLED`).
fn read_event(at: usize, lines: &[Line], zone: &Zone) -> Result<Option<ReadEvent>, CalendarError> {
    let one = |name: &str| -> Result<Option<&Line>, CalendarError> {
        let mut found = lines.iter().filter(|l| l.name == name);
        let first = found.next();
        if let Some(second) = found.next() {
            return Err(second.error(format!(
                "given twice in the event of line {at}: expected at most one"
            )));
        }
        Ok(first)
    };
    if let Some(line) = lines.iter().find(|l| l.name == "EXRULE") {
        return Err(line.error(
            "EXRULE is not supported (RFC 5545 deprecates it): list the instances to leave out with EXDATE",
        ));
    }
    if one("STATUS")?.is_some_and(|l| l.value.eq_ignore_ascii_case("CANCELLED")) {
        return Ok(None);
    }
    let Some(dtstart) = one("DTSTART")? else {
        return Err(CalendarError::Ics {
            line: at,
            message: "VEVENT without DTSTART: expected e.g. DTSTART;VALUE=DATE:20261001".into(),
        });
    };
    let start = when(dtstart, &dtstart.value)?;
    let (event_zone, kind) = match &start {
        When::Date(_) => (zone.tz().clone(), Kind::AllDay),
        When::Floating(_) => (zone.tz().clone(), Kind::Timed),
        When::Zoned(_, tz) => (tz.clone(), Kind::Timed),
        When::Utc(_) => (TimeZone::UTC, Kind::Timed),
    };
    let zone_name = match &start {
        When::Zoned(_, _) => dtstart.param("TZID").unwrap_or("UTC").to_string(),
        When::Utc(_) => "UTC".to_string(),
        _ => zone.name().to_string(),
    };
    let local_start = start.local(&event_zone);
    let length = event_length(&start, dtstart, one("DTEND")?, one("DURATION")?, zone)?;
    let mut event = Event::new(zone_name, event_zone.clone(), local_start, kind, length);
    if let Some(rrule) = one("RRULE")? {
        event
            .set_rule(&rrule.value)
            .map_err(|message| rrule.error(message))?;
    }
    instances(&mut event, lines, zone, &event_zone)?;
    let uid = one("UID")?.map(|l| l.value.clone());
    let replaces = match one("RECURRENCE-ID")? {
        Some(line) => {
            let Some(uid) = uid.clone() else {
                return Err(line.error("an override without UID: expected the UID of the recurring event it replaces an instance of"));
            };
            let instance = match when(line, &line.value)? {
                When::Date(date) => ExDate::Day(date),
                other => ExDate::At(
                    other
                        .instant(zone, line)?
                        .to_zoned_datetime(event_zone)
                        .datetime(),
                ),
            };
            Some((uid, instance))
        }
        None => None,
    };
    Ok(Some(ReadEvent {
        event,
        uid,
        replaces,
    }))
}

/// How long the event starting at `start` (given on `dtstart`) lasts:
/// from `DTEND` (a date after an all-day start, a time after a timed
/// one) or `DURATION`; an all-day event without either lasts a day.
fn event_length(
    start: &When,
    dtstart: &Line,
    dtend: Option<&Line>,
    duration: Option<&Line>,
    zone: &Zone,
) -> Result<Length, CalendarError> {
    let all_day = matches!(start, When::Date(_));
    let start_at = start.instant(zone, dtstart)?;
    let length = match (dtend, duration) {
        (Some(_), Some(duration)) => {
            return Err(duration.error("both DTEND and DURATION are set: expected one of them"));
        }
        (Some(dtend), None) => {
            let end = when(dtend, &dtend.value)?;
            match (start, &end) {
                (When::Date(first), When::Date(last)) => {
                    let days = first.until(*last).map_err(|e| dtend.error(e))?.get_days();
                    if days <= 0 {
                        return Err(dtend.error("not after DTSTART: expected a later date (DTEND of an all-day event is the day after its last day)"));
                    }
                    Length::days(i64::from(days))
                }
                (When::Date(_), _) => {
                    return Err(dtend.error(
                        "a date-time after an all-day DTSTART: expected DTEND;VALUE=DATE:YYYYMMDD",
                    ));
                }
                (_, When::Date(_)) => {
                    return Err(dtend.error(
                        "a date after a DTSTART with a time: expected a date-time such as 20261001T170000",
                    ));
                }
                _ => {
                    let exact = end.instant(zone, dtend)?.duration_since(start_at);
                    if exact <= SignedDuration::ZERO {
                        return Err(dtend.error("not after DTSTART: expected a later time"));
                    }
                    Length::exact(exact)
                }
            }
        }
        (None, Some(duration)) => {
            let length = parse_duration(&duration.value).ok_or_else(|| {
                duration.error(format!(
                    "invalid duration {:?}: expected e.g. P1D, PT2H30M or P1W",
                    duration.value
                ))
            })?;
            if length.is_empty() {
                return Err(duration.error("an empty duration: the event would contain no instant"));
            }
            length
        }
        (None, None) if all_day => Length::days(1),
        (None, None) => {
            return Err(dtstart.error(
                "a timed event without DTEND or DURATION lasts no time and contains no tick: expected DTEND or DURATION",
            ));
        }
    };
    Ok(length)
}

/// The event's `EXDATE`s and `RDATE`s (each a comma-separated list),
/// read into its zone's local time.
fn instances(
    event: &mut Event,
    lines: &[Line],
    zone: &Zone,
    event_zone: &TimeZone,
) -> Result<(), CalendarError> {
    for line in lines.iter().filter(|l| l.name == "EXDATE") {
        for value in line.value.split(',') {
            let exdate = match when(line, value)? {
                When::Date(date) => ExDate::Day(date),
                other => ExDate::At(
                    other
                        .instant(zone, line)?
                        .to_zoned_datetime(event_zone.clone())
                        .datetime(),
                ),
            };
            event.exdates.push(exdate);
        }
    }
    for line in lines.iter().filter(|l| l.name == "RDATE") {
        if line
            .param("VALUE")
            .is_some_and(|v| v.eq_ignore_ascii_case("PERIOD"))
        {
            return Err(line.error("VALUE=PERIOD is not supported: expected dates or date-times (each instance lasts as long as the event)"));
        }
        for value in line.value.split(',') {
            let local = match when(line, value)? {
                When::Date(date) => date.to_datetime(jiff::civil::Time::midnight()),
                other => other
                    .instant(zone, line)?
                    .to_zoned_datetime(event_zone.clone())
                    .datetime(),
            };
            event.rdates.push(local);
        }
    }
    Ok(())
}

/// A date or date-time value as written.
enum When {
    Date(Date),
    /// No zone: read in the calendar's.
    Floating(DateTime),
    Zoned(DateTime, TimeZone),
    Utc(DateTime),
}

impl When {
    /// The local wall time in `zone` of the value (a date at midnight).
    fn local(&self, zone: &TimeZone) -> DateTime {
        match self {
            When::Date(date) => date.to_datetime(jiff::civil::Time::midnight()),
            When::Floating(at) | When::Zoned(at, _) => *at,
            When::Utc(at) => at
                .to_zoned_datetime(TimeZone::UTC)
                .map(|z| z.timestamp().to_zoned_datetime(zone.clone()).datetime())
                .unwrap_or(*at),
        }
    }

    /// The instant, reading floating values and dates in `calendar`'s zone
    /// (a local time the clock skips or repeats as RFC 5545 says: the
    /// later offset for a gap, the earlier instant for a fold).
    fn instant(&self, calendar: &Zone, line: &Line) -> Result<Timestamp, CalendarError> {
        let (at, tz) = match self {
            When::Date(date) => (
                date.to_datetime(jiff::civil::Time::midnight()),
                calendar.tz().clone(),
            ),
            When::Floating(at) => (*at, calendar.tz().clone()),
            When::Zoned(at, tz) => (*at, tz.clone()),
            When::Utc(at) => (*at, TimeZone::UTC),
        };
        super::expand::to_instant(&tz, at)
            .ok_or_else(|| line.error(format!("{at} is out of the range of instants")))
    }
}

/// `value` of `line` (DTSTART, DTEND, EXDATE…): a date (`VALUE=DATE` or 8
/// digits) or a date-time, UTC with `Z`, in `TZID`, or floating.
fn when(line: &Line, value: &str) -> Result<When, CalendarError> {
    let value = value.trim();
    let is_date = match line.param("VALUE") {
        Some(v) if v.eq_ignore_ascii_case("DATE") => true,
        Some(v) if v.eq_ignore_ascii_case("DATE-TIME") => false,
        Some(v) => {
            return Err(line.error(format!(
                "VALUE={v} is not supported here: expected DATE or DATE-TIME"
            )));
        }
        None => value.len() == 8,
    };
    if is_date {
        return parse_date(value).map(When::Date).ok_or_else(|| {
            line.error(format!(
                "invalid date {value:?}: expected YYYYMMDD, e.g. 20261001"
            ))
        });
    }
    let (text, utc) = match value.strip_suffix('Z').or_else(|| value.strip_suffix('z')) {
        Some(text) => (text, true),
        None => (value, false),
    };
    let at = parse_datetime(text).ok_or_else(|| {
        line.error(format!(
            "invalid date-time {value:?}: expected YYYYMMDDTHHMMSS, with Z for UTC (20261001T120000Z)"
        ))
    })?;
    if utc {
        return Ok(When::Utc(at));
    }
    match line.param("TZID") {
        None => Ok(When::Floating(at)),
        Some(name) => {
            let name = name.trim_start_matches('/');
            match TimeZone::get(name) {
                Ok(tz) => Ok(When::Zoned(at, tz)),
                Err(_) => Err(line.error(format!(
                    "unknown TZID {name:?}{}: expected an IANA time zone name such as \"Europe/Berlin\" (a zone defined only by the file's VTIMEZONE is not supported)",
                    nearest_zone(name)
                ))),
            }
        }
    }
}

/// ` (did you mean "Asia/Shanghai"?)` when an IANA name is within 3
/// edits of `name`, else nothing.
fn nearest_zone(name: &str) -> String {
    let nearest = jiff::tz::db()
        .available()
        .map(|candidate| {
            let candidate = candidate.as_str().to_string();
            (strsim::levenshtein(&candidate, name), candidate)
        })
        .min();
    match nearest {
        Some((distance, candidate)) if distance <= 3 => format!(" (did you mean {candidate:?}?)"),
        _ => String::new(),
    }
}

/// `YYYYMMDDTHHMMSS`.
fn parse_datetime(text: &str) -> Option<DateTime> {
    let (date, time) = text.split_once(['T', 't'])?;
    let date = parse_date(date)?;
    if time.len() != 6 || !time.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let hour: i8 = time[0..2].parse().ok()?;
    let minute: i8 = time[2..4].parse().ok()?;
    // A leap second (60) is read as the last second of its minute.
    let second: i8 = time[4..6].parse::<i8>().ok()?.min(59);
    let time = jiff::civil::Time::new(hour, minute, second, 0).ok()?;
    Some(date.to_datetime(time))
}

/// An RFC 5545 duration (`P1D`, `PT1H30M`, `P2W`, `P1DT12H`): weeks and
/// days are nominal (local days), hours, minutes and seconds exact.
/// None when malformed or negative.
fn parse_duration(text: &str) -> Option<Length> {
    let text = text.trim();
    let text = text.strip_prefix('+').unwrap_or(text);
    let rest = text.strip_prefix('P')?;
    let (date, time) = match rest.split_once('T') {
        Some((date, time)) => (date, Some(time)),
        None => (rest, None),
    };
    let mut days: i64 = 0;
    let mut seconds: i64 = 0;
    let mut number = String::new();
    for c in date.chars() {
        match c {
            '0'..='9' => number.push(c),
            'W' => days = days.checked_add(number.parse::<i64>().ok()?.checked_mul(7)?)?,
            'D' => days = days.checked_add(number.parse::<i64>().ok()?)?,
            _ => return None,
        }
        if !c.is_ascii_digit() {
            number.clear();
        }
    }
    if !number.is_empty() {
        return None;
    }
    if let Some(time) = time {
        if time.is_empty() {
            return None;
        }
        for c in time.chars() {
            let unit = match c {
                '0'..='9' => {
                    number.push(c);
                    continue;
                }
                'H' => 3600,
                'M' => 60,
                'S' => 1,
                _ => return None,
            };
            seconds = seconds.checked_add(number.parse::<i64>().ok()?.checked_mul(unit)?)?;
            number.clear();
        }
        if !number.is_empty() {
            return None;
        }
    } else if date.is_empty() {
        return None;
    }
    // Ten years at most: a calendar's events are days, not eras.
    if days > 3660 || seconds > 3660 * 86_400 {
        return None;
    }
    Some(Length {
        days,
        exact: SignedDuration::from_secs(seconds),
    })
}

/// The logical lines of `text`: unfolded (a line starting with a space or
/// a tab continues the one before), cut into name, parameters and value.
fn content_lines(text: &str) -> Result<Vec<Line>, CalendarError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut logical: Vec<(usize, String)> = Vec::new();
    for (index, physical) in text.split('\n').enumerate() {
        let physical = physical.strip_suffix('\r').unwrap_or(physical);
        if let Some(rest) = physical.strip_prefix([' ', '\t']) {
            match logical.last_mut() {
                Some((_, line)) => line.push_str(rest),
                None => {
                    return Err(CalendarError::Ics {
                        line: index + 1,
                        message: "a continuation line before any property".into(),
                    });
                }
            }
        } else if !physical.trim().is_empty() {
            logical.push((index + 1, physical.to_string()));
        }
    }
    logical
        .into_iter()
        .map(|(number, line)| cut_line(number, &line))
        .collect()
}

/// `NAME;PARAM=value;PARAM="quoted":value`.
fn cut_line(number: usize, line: &str) -> Result<Line, CalendarError> {
    let bad = |message: &str| CalendarError::Ics {
        line: number,
        message: format!("{message}: expected NAME:value or NAME;PARAM=value:value"),
    };
    // The name, and each parameter, end at `;` or `:` outside quotes.
    let mut parts: Vec<String> = Vec::new();
    let mut current = String::new();
    let mut quoted = false;
    let mut value = None;
    for (i, c) in line.char_indices() {
        match c {
            '"' => {
                quoted = !quoted;
                current.push(c);
            }
            ';' if !quoted => parts.push(std::mem::take(&mut current)),
            ':' if !quoted => {
                parts.push(std::mem::take(&mut current));
                value = Some(line[i + 1..].to_string());
                break;
            }
            _ => current.push(c),
        }
    }
    let Some(value) = value else {
        return Err(bad("a line without `:`"));
    };
    let mut parts = parts.into_iter();
    let name = parts.next().unwrap_or_default().trim().to_ascii_uppercase();
    if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-') {
        return Err(bad(&format!("invalid property name {name:?}")));
    }
    let mut params = Vec::new();
    for part in parts {
        let Some((key, value)) = part.split_once('=') else {
            return Err(bad(&format!("invalid parameter {part:?} of {name}")));
        };
        let value = value.trim();
        let value = value
            .strip_prefix('"')
            .and_then(|v| v.strip_suffix('"'))
            .unwrap_or(value);
        params.push((key.trim().to_ascii_uppercase(), value.to_string()));
    }
    Ok(Line {
        number,
        name,
        params,
        value,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_are_nominal_days_and_exact_times() {
        let check = |text: &str, days: i64, secs: i64| {
            let length = parse_duration(text).unwrap_or_else(|| panic!("{text}"));
            assert_eq!(
                (length.days, length.exact.as_secs()),
                (days, secs),
                "{text}"
            );
        };
        check("P1D", 1, 0);
        check("P2W", 14, 0);
        check("PT1H30M", 0, 5400);
        check("P1DT12H", 1, 43200);
        check("+PT15S", 0, 15);
        for bad in [
            "", "P", "PT", "-P1D", "P1H", "PT1D", "P1DT", "1D", "P99999D",
        ] {
            assert!(parse_duration(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn folded_lines_are_joined_and_quoted_parameters_kept_whole() {
        let lines = content_lines(
            "BEGIN:VCALENDAR\r\nDTSTART;TZID=\"Europe/Berlin\";X-A=\"a:b;c\":2026\r\n 0101T000000\r\nEND:VCALENDAR\r\n",
        )
        .expect("valid lines");
        assert_eq!(lines.len(), 3);
        assert_eq!(lines[1].number, 2);
        assert_eq!(lines[1].value, "20260101T000000");
        assert_eq!(lines[1].param("TZID"), Some("Europe/Berlin"));
        assert_eq!(lines[1].param("X-A"), Some("a:b;c"));
    }
}
