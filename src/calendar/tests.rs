//! Calendars read from iCalendar texts and dates, asked about instants.

use super::*;

fn ics(events: &str) -> String {
    format!("BEGIN:VCALENDAR\r\nVERSION:2.0\r\nPRODID:-//test//EN\r\n{events}END:VCALENDAR\r\n")
}

fn calendar(events: &str, zone: &str) -> Calendar {
    Calendar::from_ics("test", &ics(events), zone).unwrap_or_else(|e| panic!("{e}"))
}

fn at(text: &str) -> Timestamp {
    text.parse().unwrap_or_else(|e| panic!("{text}: {e}"))
}

/// Whether each instant is inside the calendar.
fn check(calendar: &Calendar, cases: &[(&str, bool)]) {
    for (instant, inside) in cases {
        assert_eq!(calendar.contains(at(instant)), *inside, "{instant}");
    }
}

fn error(events: &str) -> CalendarError {
    Calendar::from_ics("test", &ics(events), "Europe/Berlin").expect_err("invalid")
}

#[test]
fn a_yearly_holiday_on_the_day_of_a_dst_change_lasts_that_days_23_hours() {
    // 2026-03-29: Berlin moves from +01:00 to +02:00 at 02:00.
    let holidays = calendar(
        "BEGIN:VEVENT\r\nUID:a\r\nDTSTART;VALUE=DATE:20260329\r\nRRULE:FREQ=YEARLY\r\nEND:VEVENT\r\n\
         BEGIN:VEVENT\r\nUID:b\r\nDTSTART;VALUE=DATE:20260330\r\nDTEND;VALUE=DATE:20260331\r\n\
         RRULE:FREQ=YEARLY;COUNT=3\r\nEND:VEVENT\r\n",
        "Europe/Berlin",
    );
    check(
        &holidays,
        &[
            ("2026-03-28T22:59:59Z", false),
            ("2026-03-28T23:00:00Z", true), // local midnight, +01:00
            ("2026-03-29T12:00:00Z", true),
            ("2026-03-29T21:59:59Z", true),
            ("2026-03-29T22:00:00Z", true), // the next day's holiday, +02:00
            ("2026-03-30T21:59:59Z", true),
            ("2026-03-30T22:00:00Z", false),
            ("2027-03-28T23:00:00Z", true),
            ("2028-03-30T12:00:00Z", true),
            // COUNT=3: 2026, 2027, 2028.
            ("2029-03-30T12:00:00Z", false),
            ("2029-03-29T12:00:00Z", true),
        ],
    );
}

#[test]
fn an_exdate_takes_one_years_occurrence_out() {
    let holidays = calendar(
        "BEGIN:VEVENT\r\nDTSTART;VALUE=DATE:20251003\r\nRRULE:FREQ=YEARLY;BYMONTH=10;BYMONTHDAY=3\r\n\
         EXDATE;VALUE=DATE:20271003,20291003\r\nEXDATE;VALUE=DATE:20301003\r\nEND:VEVENT\r\n",
        "Europe/Berlin",
    );
    check(
        &holidays,
        &[
            ("2026-10-03T10:00:00Z", true),
            ("2027-10-03T10:00:00Z", false),
            ("2028-10-03T10:00:00Z", true),
            ("2029-10-03T10:00:00Z", false),
            ("2030-10-03T10:00:00Z", false),
            ("2031-10-03T10:00:00Z", true),
        ],
    );
}

#[test]
fn a_weekly_timed_event_keeps_its_local_time_across_dst() {
    // Mondays 09:00-10:00 Berlin time, from before to after the change.
    let meetings = calendar(
        "BEGIN:VEVENT\r\nDTSTART;TZID=Europe/Berlin:20260316T090000\r\n\
         DTEND;TZID=Europe/Berlin:20260316T100000\r\nRRULE:FREQ=WEEKLY;BYDAY=MO;UNTIL=20260420T070000Z\r\n\
         EXDATE;TZID=Europe/Berlin:20260406T090000\r\nEND:VEVENT\r\n",
        "UTC",
    );
    check(
        &meetings,
        &[
            ("2026-03-23T08:00:00Z", true), // 09:00 +01:00
            ("2026-03-23T08:59:59Z", true),
            ("2026-03-23T09:00:00Z", false),
            ("2026-03-30T07:00:00Z", true), // 09:00 +02:00
            ("2026-03-30T08:00:00Z", false),
            ("2026-04-06T07:30:00Z", false), // EXDATE
            ("2026-04-13T07:30:00Z", true),
            ("2026-04-20T07:30:00Z", true), // UNTIL is this instance's start
            ("2026-04-27T07:30:00Z", false),
            ("2026-03-17T08:30:00Z", false), // a Tuesday
        ],
    );
}

#[test]
fn utc_and_floating_times_and_durations() {
    let events = calendar(
        "BEGIN:VEVENT\r\nDTSTART:20261001T120000Z\r\nDURATION:PT30M\r\nEND:VEVENT\r\n\
         BEGIN:VEVENT\r\nDTSTART:20261002T120000\r\nDURATION:P1DT1H\r\nEND:VEVENT\r\n\
         BEGIN:VEVENT\r\nSTATUS:CANCELLED\r\nDTSTART:20261010T120000Z\r\nDURATION:PT1H\r\nEND:VEVENT\r\n",
        "Asia/Shanghai",
    );
    check(
        &events,
        &[
            ("2026-10-01T12:00:00Z", true),
            ("2026-10-01T12:29:59Z", true),
            ("2026-10-01T12:30:00Z", false),
            // Floating: noon in Shanghai (04:00Z) to 13:00 the next day.
            ("2026-10-02T03:59:59Z", false),
            ("2026-10-02T04:00:00Z", true),
            ("2026-10-03T04:59:59Z", true),
            ("2026-10-03T05:00:00Z", false),
            ("2026-10-10T12:30:00Z", false),
        ],
    );
}

#[test]
fn an_override_moves_one_instance_and_rdates_add_some() {
    let events = calendar(
        "BEGIN:VEVENT\r\nUID:standup\r\nDTSTART:20260105T090000Z\r\nDURATION:PT15M\r\n\
         RRULE:FREQ=DAILY;INTERVAL=2;COUNT=5\r\nRDATE:20260120T090000Z\r\nEND:VEVENT\r\n\
         BEGIN:VEVENT\r\nUID:standup\r\nRECURRENCE-ID:20260107T090000Z\r\n\
         DTSTART:20260107T140000Z\r\nDURATION:PT15M\r\nEND:VEVENT\r\n",
        "UTC",
    );
    check(
        &events,
        &[
            ("2026-01-05T09:10:00Z", true),
            ("2026-01-06T09:10:00Z", false),
            ("2026-01-07T09:10:00Z", false), // moved
            ("2026-01-07T14:10:00Z", true),
            ("2026-01-13T09:10:00Z", true), // the fifth
            ("2026-01-15T09:10:00Z", false),
            ("2026-01-20T09:10:00Z", true), // RDATE
        ],
    );
}

#[test]
fn an_unbounded_rule_is_asked_far_ahead_without_expanding_the_years_between() {
    let hourly = calendar(
        "BEGIN:VEVENT\r\nDTSTART:20260101T000000Z\r\nDURATION:PT10M\r\nRRULE:FREQ=HOURLY\r\nEND:VEVENT\r\n",
        "UTC",
    );
    let started = std::time::Instant::now();
    check(
        &hourly,
        &[
            ("2026-06-01T05:05:00Z", true),
            ("2026-06-01T05:15:00Z", false),
            ("2031-06-01T05:05:00Z", true),
        ],
    );
    for second in 0..100_000 {
        hourly.contains_ms(1_780_000_000_000 + second * 1000);
    }
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
    assert!(hourly.inner.windows.lock().expect("not poisoned").len() <= WINDOWS_KEPT);
}

#[test]
fn dates_are_whole_days_in_the_calendars_zone() {
    let days = Calendar::from_dates(
        "golden-week",
        [
            jiff::civil::date(2026, 10, 1),
            jiff::civil::date(2026, 10, 2),
        ],
        "Asia/Shanghai",
    )
    .expect("valid");
    check(
        &days,
        &[
            ("2026-09-30T15:59:59Z", false),
            ("2026-09-30T16:00:00Z", true),
            ("2026-10-02T15:59:59Z", true),
            ("2026-10-02T16:00:00Z", false),
        ],
    );
}

#[test]
fn the_content_hash_is_the_meaning_not_the_text() {
    let one = calendar(
        "BEGIN:VEVENT\r\nSUMMARY:A\r\nDTSTART;VALUE=DATE:20261001\r\nEND:VEVENT\r\n\
         BEGIN:VEVENT\r\nDTSTART;VALUE=DATE:20261002\r\nEND:VEVENT\r\n",
        "UTC",
    );
    let reordered = calendar(
        "BEGIN:VEVENT\r\nDTSTART;VALUE=DATE:20261002\r\nDTEND;VALUE=DATE:20261003\r\nEND:VEVENT\r\n\
         BEGIN:VEVENT\r\nDTSTART;VALUE=DATE:20261001\r\nSUMMARY:B\r\nEND:VEVENT\r\n",
        "UTC",
    );
    let dates = Calendar::from_dates(
        "test",
        [
            jiff::civil::date(2026, 10, 1),
            jiff::civil::date(2026, 10, 2),
        ],
        "UTC",
    )
    .expect("valid");
    let other = calendar(
        "BEGIN:VEVENT\r\nDTSTART;VALUE=DATE:20261003\r\nEND:VEVENT\r\n",
        "UTC",
    );
    assert_eq!(one.content_hash(), reordered.content_hash());
    assert_eq!(one.content_hash(), dates.content_hash());
    assert_ne!(one.content_hash(), other.content_hash());
    assert_eq!(
        format!("{one:?}"),
        format!(
            "Calendar {{ name: \"test\", hash: \"{}\" }}",
            one.content_hash()
        )
    );
}

#[test]
fn what_is_not_understood_is_refused_by_line() {
    let cases = [
        (
            "BEGIN:VEVENT\r\nDTSTART;TZID=Europe/Berlim:20261001T090000\r\nDURATION:PT1H\r\nEND:VEVENT\r\n",
            5,
            "unknown TZID \"Europe/Berlim\"",
        ),
        (
            "BEGIN:VEVENT\r\nDTSTART:20261001T090000Z\r\nEND:VEVENT\r\n",
            5,
            "without DTEND or DURATION",
        ),
        (
            "BEGIN:VEVENT\r\nDTSTART;VALUE=DATE:20261001\r\nRRULE:FREQ=MINUTELY\r\nEND:VEVENT\r\n",
            6,
            "FREQ=MINUTELY is not supported",
        ),
        (
            "BEGIN:VEVENT\r\nDTSTART;VALUE=DATE:20261001\r\nRRULE:FREQ=SOMETIMES\r\nEND:VEVENT\r\n",
            6,
            "RRULE: invalid rule",
        ),
        (
            "BEGIN:VEVENT\r\nDTSTART;VALUE=DATE:20261301\r\nEND:VEVENT\r\n",
            5,
            "invalid date \"20261301\"",
        ),
        (
            "BEGIN:VEVENT\r\nDTSTART;VALUE=DATE:20261001\r\nDTEND;VALUE=DATE:20261001\r\nEND:VEVENT\r\n",
            6,
            "not after DTSTART",
        ),
        (
            "BEGIN:VEVENT\r\nSUMMARY:x\r\nEND:VEVENT\r\n",
            4,
            "VEVENT without DTSTART",
        ),
        (
            "BEGIN:VEVENT\r\nDTSTART;VALUE=DATE:20261001\r\nEXRULE:FREQ=YEARLY\r\nEND:VEVENT\r\n",
            6,
            "EXRULE is not supported",
        ),
        (
            "BEGIN:VEVENT\r\nDTSTART;VALUE=DATE:20261001\r\n",
            6,
            "END:VCALENDAR closes BEGIN:VEVENT of line 4",
        ),
        (
            "BEGIN:VEVENT\r\nDTSTART;VALUE=DATE:20261001\r\nRDATE;VALUE=PERIOD:20261001T000000Z/PT1H\r\nEND:VEVENT\r\n",
            6,
            "VALUE=PERIOD is not supported",
        ),
    ];
    for (events, line, message) in cases {
        let error = error(events);
        let CalendarError::Ics { line: found, .. } = &error else {
            panic!("{error:?}");
        };
        assert_eq!(*found, line, "{error}");
        assert!(error.to_string().contains(message), "{error}");
    }
    assert!(matches!(
        Calendar::from_ics("test", "hello", "UTC"),
        Err(CalendarError::Ics { line: 1, .. })
    ));
    assert!(matches!(
        Calendar::from_dates("bad name", [], "UTC"),
        Err(CalendarError::Name { .. })
    ));
    let zone = Calendar::from_dates("x", [], "Europe/Berlim").expect_err("a typo");
    assert!(
        zone.to_string().contains("did you mean \"Europe/Berlin\""),
        "{zone}"
    );
}

#[test]
fn exclude_wins_and_several_only_calendars_mean_any_of_them() {
    let day = |name: &str, d: i8| {
        Calendar::from_dates(name, [jiff::civil::date(2026, 10, d)], "UTC").expect("valid")
    };
    let calendars = JobCalendars {
        exclude: vec![day("holiday", 1)],
        only: vec![day("a", 1), day("b", 2)],
    };
    let ms = |text: &str| at(text).as_millisecond();
    let excluded = calendars
        .excluded_by(ms("2026-10-01T12:00:00Z"))
        .expect("a holiday");
    assert_eq!(excluded.to_string(), "excluded by calendar holiday");
    assert_eq!(calendars.excluded_by(ms("2026-10-02T12:00:00Z")), None);
    let outside = calendars
        .excluded_by(ms("2026-10-03T12:00:00Z"))
        .expect("in neither");
    assert_eq!(outside.as_arg(), "only a,b");
    assert_eq!(outside.to_string(), "outside calendars a,b");
    assert_eq!(JobCalendars::default().excluded_by(0), None);
}

#[test]
fn an_ordinal_weekday_rule_finds_the_fourth_thursday_of_november() {
    let thanksgiving = calendar(
        "BEGIN:VEVENT\r\nDTSTART;VALUE=DATE:20261126\r\nRRULE:FREQ=YEARLY;BYMONTH=11;BYDAY=4TH\r\nEND:VEVENT\r\n",
        "America/New_York",
    );
    check(
        &thanksgiving,
        &[
            ("2027-11-25T17:00:00Z", true),
            ("2027-11-26T17:00:00Z", false),
            ("2028-11-23T17:00:00Z", true),
            ("2028-11-30T17:00:00Z", false),
        ],
    );
}

#[test]
fn a_rule_that_never_matches_answers_without_hanging() {
    let never = calendar(
        "BEGIN:VEVENT\r\nDTSTART;VALUE=DATE:20260101\r\nRRULE:FREQ=YEARLY;BYMONTH=2;BYMONTHDAY=30\r\nEND:VEVENT\r\n\
         BEGIN:VEVENT\r\nDTSTART:19700101T000000Z\r\nDURATION:PT1M\r\nRRULE:FREQ=HOURLY;INTERVAL=7\r\nEND:VEVENT\r\n",
        "UTC",
    );
    let started = std::time::Instant::now();
    check(
        &never,
        &[
            ("2026-01-01T12:00:00Z", true), // DTSTART is an instance
            ("2027-02-28T12:30:00Z", false),
            ("2030-03-01T12:30:00Z", false),
        ],
    );
    assert!(
        started.elapsed() < std::time::Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
}
