//! `[calendars.<name>]`: named calendars, each read from an iCalendar
//! file (`file`, relative to the config file's directory) or a list of
//! whole days (`dates`), in a `timezone` (UTC unless set); and a job's
//! `exclude` and `only`, which name them. Every calendar is read when the
//! table is loaded (a reload reads the files again), so a table whose
//! calendar file is unreadable or invalid is refused whole.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;
use toml::Spanned;
use toml::de::DeValue;

use super::checker::{Checker, Given, is_name};
use super::environment;
use crate::calendar::{Calendar, CalendarError, JobCalendars};
use crate::schedule::Timetable;

/// A job's `exclude` and `only`, each with its field's name.
pub(super) type CalendarFields<'a> = [(&'a str, Option<&'a Given<Vec<Given<String>>>>); 2];

/// The largest calendar file read: a calendar is kilobytes.
const MAX_CALENDAR_FILE: u64 = 16 * 1024 * 1024;

/// One `[calendars.<name>]` as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawCalendar {
    file: Option<Given<String>>,
    dates: Option<Given<Vec<Given<String>>>>,
    timezone: Option<Given<String>>,
}

/// The calendars of a table: the valid ones by name, and the names of
/// every one declared (a job naming an invalid one is not told again that
/// it does not exist).
#[derive(Debug, Clone, Default)]
pub(crate) struct Calendars {
    pub(crate) valid: BTreeMap<String, Calendar>,
    pub(crate) declared: Vec<String>,
}

/// Each `[calendars.<name>]` of the `calendars` table, deserialized on
/// its own.
pub(super) fn read_calendars(
    checker: &mut Checker<'_>,
    value: &Spanned<DeValue<'_>>,
) -> Vec<(Spanned<String>, Option<RawCalendar>)> {
    let DeValue::Table(table) = value.get_ref() else {
        checker.problem(
            Some(value.span()),
            Some("calendars"),
            None,
            "expected a table of calendars: [calendars.<name>]".into(),
        );
        return Vec::new();
    };
    table
        .iter()
        .map(|(name, raw)| {
            let section = format!("calendars.{}", name.get_ref());
            let calendar = checker.deserialize_table::<RawCalendar>(&section, raw);
            let name = Spanned::new(name.span(), name.get_ref().to_string());
            (name, calendar)
        })
        .collect()
}

/// Every calendar read and checked; `base_dir` is where relative files
/// are.
pub(super) fn validate_calendars(
    checker: &mut Checker<'_>,
    raw: Vec<(Spanned<String>, Option<RawCalendar>)>,
    base_dir: &Path,
) -> Calendars {
    let mut calendars = Calendars::default();
    for (name, raw) in raw {
        let (at, name) = (name.span(), name.into_inner());
        calendars.declared.push(name.clone());
        let section = format!("calendars.{name}");
        if !is_name(&name, 128) {
            checker.problem(
                Some(at),
                Some(&section),
                None,
                format!("invalid calendar name {name:?}: expected 1 to 128 characters from A-Z a-z 0-9 _ . -"),
            );
            continue;
        }
        let Some(raw) = raw else { continue };
        if let Some(calendar) = validate_calendar(checker, &section, &name, at, raw, base_dir) {
            calendars.valid.insert(name, calendar);
        }
    }
    calendars.declared.sort();
    calendars
}

fn validate_calendar(
    checker: &mut Checker<'_>,
    section: &str,
    name: &str,
    at: std::ops::Range<usize>,
    raw: RawCalendar,
    base_dir: &Path,
) -> Option<Calendar> {
    let zone = match &raw.timezone {
        None => "UTC".to_string(),
        Some(zone) => match crate::schedule::Zone::parse(zone.get()) {
            Ok(parsed) => parsed.name().to_string(),
            Err(e) => {
                checker.problem(zone.at(), Some(section), Some("timezone"), e.to_string());
                return None;
            }
        },
    };
    match (raw.file, raw.dates) {
        (Some(_), Some(dates)) => {
            checker.problem(
                dates.at(),
                Some(section),
                Some("dates"),
                "both `file` and `dates` are set: expected one of them (`file = \"holidays.ics\"`, an iCalendar file, or `dates = [\"2026-10-01\"]`)".into(),
            );
            None
        }
        (None, None) => {
            checker.problem(
                Some(at),
                Some(section),
                Some("file"),
                "neither `file` nor `dates` is set: expected `file = \"holidays.ics\"` (an iCalendar file, relative to the config file) or `dates = [\"2026-10-01\"]`".into(),
            );
            None
        }
        (Some(file), None) => calendar_from_file(checker, section, name, file, &zone, base_dir),
        (None, Some(dates)) => calendar_from_dates(checker, section, name, at, dates, &zone),
    }
}

/// A calendar read from the iCalendar file `file` names (relative to
/// `base_dir`); a problem names the file and its line.
fn calendar_from_file(
    checker: &mut Checker<'_>,
    section: &str,
    name: &str,
    file: Given<String>,
    zone: &str,
    base_dir: &Path,
) -> Option<Calendar> {
    if file.get().trim().is_empty() {
        checker.problem(
            file.at(),
            Some(section),
            Some("file"),
            "empty path: expected an iCalendar file, absolute or relative to the config file"
                .into(),
        );
        return None;
    }
    let path = base_dir.join(file.get());
    let text = match environment::read_bounded(&path, MAX_CALENDAR_FILE).and_then(|bytes| {
        String::from_utf8(bytes)
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
    }) {
        Ok(text) => text,
        Err(e) => {
            checker.problem(
                file.at(),
                Some(section),
                Some("file"),
                format!("cannot read {}: {e}", path.display()),
            );
            return None;
        }
    };
    match Calendar::from_ics(name, &text, zone) {
        Ok(calendar) => Some(calendar),
        Err(CalendarError::Ics { line, message }) => {
            checker.problem(
                file.at(),
                Some(section),
                Some("file"),
                format!("{}:{line}: {message}", path.display()),
            );
            None
        }
        Err(e) => {
            checker.problem(file.at(), Some(section), Some("file"), e.to_string());
            None
        }
    }
}

/// A calendar of the whole days `dates` (`YYYY-MM-DD`).
fn calendar_from_dates(
    checker: &mut Checker<'_>,
    section: &str,
    name: &str,
    at: std::ops::Range<usize>,
    dates: Given<Vec<Given<String>>>,
    zone: &str,
) -> Option<Calendar> {
    let mut days = Vec::new();
    let mut valid = true;
    for date in dates.into_inner() {
        match date.get().trim().parse::<jiff::civil::Date>() {
            Ok(day) if date.get().trim().len() == 10 => days.push(day),
            _ => {
                valid = false;
                checker.problem(
                    date.at(),
                    Some(section),
                    Some("dates"),
                    format!(
                        "invalid date {:?}: expected YYYY-MM-DD, e.g. \"2026-10-01\"",
                        date.get()
                    ),
                );
            }
        }
    }
    if !valid {
        return None;
    }
    match Calendar::from_dates(name, days, zone) {
        Ok(calendar) => Some(calendar),
        Err(e) => {
            checker.problem(Some(at), Some(section), None, e.to_string());
            None
        }
    }
}

/// A job's `exclude` and `only`: each name a calendar of the table or,
/// for an embedded job, one it was given (`given`).
///
/// `schedule` is the job's, when it was valid: a job without one (it runs
/// after other jobs) has no ticks to leave out.
pub(super) fn job_calendars(
    checker: &mut Checker<'_>,
    section: &str,
    fields: CalendarFields<'_>,
    (table, given): (&Calendars, &[Calendar]),
    schedule: Option<&Option<Timetable>>,
) -> JobCalendars {
    let calendars = named_calendars(checker, section, fields, table, given);
    if matches!(schedule, Some(None)) && !calendars.is_empty() {
        let field = if calendars.exclude.is_empty() {
            "only"
        } else {
            "exclude"
        };
        checker.problem(
            None,
            Some(section),
            Some(field),
            format!("`{field}` leaves out ticks of the job's schedule, and the job has none (it runs after other jobs): expected a `schedule`, or no `{field}`"),
        );
    }
    calendars
}

/// The calendars `fields` name, each looked up among those `given` to an
/// embedded job, then the table's.
fn named_calendars(
    checker: &mut Checker<'_>,
    section: &str,
    fields: CalendarFields<'_>,
    table: &Calendars,
    given: &[Calendar],
) -> JobCalendars {
    let mut calendars = JobCalendars::default();
    for (field, names) in fields {
        let Some(names) = names else { continue };
        let mut chosen: Vec<Calendar> = Vec::new();
        for name in names.get() {
            let found = given
                .iter()
                .find(|c| c.name() == name.get())
                .or_else(|| table.valid.get(name.get()));
            match found {
                Some(calendar) if chosen.iter().any(|c| c.name() == calendar.name()) => {
                    checker.problem(
                        name.at(),
                        Some(section),
                        Some(field),
                        format!(
                            "calendar {:?} is listed twice: expected each once",
                            name.get()
                        ),
                    );
                }
                Some(calendar) => chosen.push(calendar.clone()),
                // Declared but invalid: its own problems say why.
                None if table.declared.contains(name.get()) => {}
                None => {
                    let known = if table.declared.is_empty() {
                        "no calendar is defined: expected a [calendars.<name>] table".to_string()
                    } else {
                        format!(
                            "expected one of {}",
                            table
                                .declared
                                .iter()
                                .map(|n| format!("{n:?}"))
                                .collect::<Vec<_>>()
                                .join(", ")
                        )
                    };
                    checker.problem(
                        name.at(),
                        Some(section),
                        Some(field),
                        format!("unknown calendar {:?}: {known}", name.get()),
                    );
                }
            }
        }
        match field {
            "exclude" => calendars.exclude = chosen,
            _ => calendars.only = chosen,
        }
    }
    calendars
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use crate::config::{Config, ConfigError};

    const HEAD: &str = "[redis]\nurl = \"redis://127.0.0.1:1\"\n";

    fn parse_in(dir: &Path, text: &str) -> Result<Config, ConfigError> {
        Config::parse(&format!("{HEAD}{text}"), &dir.join("jobs.toml"))
    }

    /// Every problem as `line: section, field: message`.
    fn problems(dir: &Path, text: &str) -> Vec<String> {
        parse_in(dir, text)
            .expect_err("invalid")
            .problems
            .iter()
            .map(|p| {
                format!(
                    "{}: {}, {}: {}",
                    p.line_col.map_or(0, |(line, _)| line),
                    p.section.as_deref().unwrap_or(""),
                    p.field.as_deref().unwrap_or(""),
                    p.message
                )
            })
            .collect()
    }

    const ICS: &str = "BEGIN:VCALENDAR\nBEGIN:VEVENT\nDTSTART;VALUE=DATE:20261001\nRRULE:FREQ=YEARLY\nEND:VEVENT\nEND:VCALENDAR\n";

    #[test]
    fn jobs_name_the_calendars_of_the_table() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        std::fs::write(dir.path().join("holidays.ics"), ICS).expect("written");
        let config = parse_in(
            dir.path(),
            "[calendars.holidays-cn]\nfile = \"holidays.ics\"\ntimezone = \"Asia/Shanghai\"\n\
             [calendars.trading-days]\ndates = [\"2026-10-08\", \"2026-10-09\"]\n\
             [jobs.draw]\nschedule = \"0 12 * * *\"\ncommand = [\"x\"]\n\
             exclude = [\"holidays-cn\"]\nonly = [\"trading-days\"]\n",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let job = &config.jobs["draw"];
        let noon = |date: &str| {
            format!("{date}T12:00:00+08:00")
                .parse::<jiff::Timestamp>()
                .expect("an instant")
                .as_millisecond()
        };
        let holiday = job.excluded_by(noon("2027-10-01")).expect("a holiday");
        assert_eq!(holiday.to_string(), "excluded by calendar holidays-cn");
        assert_eq!(job.excluded_by(noon("2026-10-08")), None);
        let outside = job
            .excluded_by(noon("2026-10-12"))
            .expect("not a trading day");
        assert_eq!(outside.to_string(), "outside calendar trading-days");
    }

    #[test]
    fn bad_calendars_and_references_are_named_with_their_place() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        std::fs::write(
            dir.path().join("bad.ics"),
            "BEGIN:VCALENDAR\nBEGIN:VEVENT\nDTSTART;TZID=Asia/Shangai:20261001T090000\nDURATION:PT1H\nEND:VEVENT\nEND:VCALENDAR\n",
        )
        .expect("written");
        let found = problems(
            dir.path(),
            "[calendars.both]\nfile = \"a.ics\"\ndates = [\"2026-10-01\"]\n\
             [calendars.neither]\ntimezone = \"UTC\"\n\
             [calendars.bad]\nfile = \"bad.ics\"\n\
             [calendars.missing]\nfile = \"missing.ics\"\n\
             [calendars.day]\ndates = [\"2026-13-01\", \"1.10.2026\"]\n\
             [jobs.draw]\nschedule = \"0 12 * * *\"\ncommand = [\"x\"]\n\
             exclude = [\"holidays\", \"bad\"]\nonly = [\"day\", \"neither\"]\n",
        );
        let bad = dir.path().join("bad.ics");
        let missing = dir.path().join("missing.ics");
        assert_eq!(
            found,
            [
                "5: calendars.both, dates: both `file` and `dates` are set: expected one of them (`file = \"holidays.ics\"`, an iCalendar file, or `dates = [\"2026-10-01\"]`)".to_string(),
                "6: calendars.neither, file: neither `file` nor `dates` is set: expected `file = \"holidays.ics\"` (an iCalendar file, relative to the config file) or `dates = [\"2026-10-01\"]`".to_string(),
                format!("9: calendars.bad, file: {}:3: DTSTART: unknown TZID \"Asia/Shangai\" (did you mean \"Asia/Shanghai\"?): expected an IANA time zone name such as \"Europe/Berlin\" (a zone defined only by the file's VTIMEZONE is not supported)", bad.display()),
                format!("11: calendars.missing, file: cannot read {}: No such file or directory (os error 2)", missing.display()),
                "13: calendars.day, dates: invalid date \"2026-13-01\": expected YYYY-MM-DD, e.g. \"2026-10-01\"".to_string(),
                "13: calendars.day, dates: invalid date \"1.10.2026\": expected YYYY-MM-DD, e.g. \"2026-10-01\"".to_string(),
                "17: jobs.draw, exclude: unknown calendar \"holidays\": expected one of \"bad\", \"both\", \"day\", \"missing\", \"neither\"".to_string(),
            ]
        );
    }

    #[test]
    fn calendars_are_part_of_the_definition_hash_and_a_job_without_keeps_its_own() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let job = |calendar: &str, exclude: &str| {
            let config = parse_in(
                dir.path(),
                &format!("{calendar}[jobs.a]\nschedule = \"@daily\"\ncommand = [\"x\"]\n{exclude}"),
            )
            .unwrap_or_else(|e| panic!("{e}"));
            config.jobs["a"].clone()
        };
        let plain = job("", "");
        // The hash reads the Debug form with this part (and an unset
        // `group`) taken out: what it was before calendars existed, so
        // replicas of both releases agree.
        let debug = format!("{plain:?}");
        assert!(
            debug.ends_with(
                ", calendars: JobCalendars { exclude: [], only: [] }, run_on: [], mode: One, group: None }"
            ),
            "{debug}"
        );
        let declared = job("[calendars.c]\ndates = [\"2026-10-01\"]\n", "");
        assert_eq!(plain.definition_hash(), declared.definition_hash());
        let one = job(
            "[calendars.c]\ndates = [\"2026-10-01\"]\n",
            "exclude = [\"c\"]\n",
        );
        let other = job(
            "[calendars.c]\ndates = [\"2026-10-02\"]\n",
            "exclude = [\"c\"]\n",
        );
        let same = job(
            "[calendars.c]\ndates = [\"2026-10-01\"]\ntimezone = \"UTC\"\n",
            "exclude = [\"c\"]\n",
        );
        assert_ne!(plain.definition_hash(), one.definition_hash());
        assert_ne!(one.definition_hash(), other.definition_hash());
        assert_eq!(one.definition_hash(), same.definition_hash());
    }
}
