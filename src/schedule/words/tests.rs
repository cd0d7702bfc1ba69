//! The readings of `describe`: tables of expression and words, random
//! expressions, and readings checked against the ticks they describe.

use super::super::{DstPolicy, Zone};
use super::*;
use chrono::{DateTime, Utc};

/// The one helper: `expression`, parsed for the job "job", reads as
/// `expected`.
#[track_caller]
fn check(expression: &str, expected: &str) {
    let schedule = Schedule::parse(expression, Zone::utc(), "job", DstPolicy::default())
        .unwrap_or_else(|e| panic!("{expression:?}: {e}"));
    assert_eq!(schedule.describe(), expected, "{expression:?}");
}

#[test]
fn common_schedules_read_as_crontab_guru_would() {
    check("0 12 * * *", "at 12:00 every day");
    check("*/15 * * * *", "every 15 minutes");
    check("* * * * *", "every minute");
    check("30 2 * * 1-5", "at 02:30 on Monday to Friday");
    check("0 9,17 * * *", "at 09:00 and 17:00 every day");
    check("0 0 1 * *", "at 00:00 on day 1 of the month");
    check("0 0 1 1 *", "at 00:00 on 1 January");
    check("15 * * * *", "at 15 minutes past every hour");
    check("1 * * * *", "at 1 minute past every hour");
    check("0 * * * *", "at the start of every hour");
    check("0 */2 * * *", "every 2 hours from 00:00 to 22:00");
    check("30 1-23/2 * * *", "every 2 hours from 01:30 to 23:30");
    check("0 12 * * 0", "at 12:00 on Sunday");
    check("0 12 * * 7", "at 12:00 on Sunday");
    check("0 0 * * 6,0", "at 00:00 on Saturday and Sunday");
    check("0 0 * * 5-0", "at 00:00 on Friday to Sunday");
    check("0 0 * * 1,3,5", "at 00:00 on Monday, Wednesday and Friday");
    check("*/30 * * * *", "every 30 minutes");
    check(
        "5/15 * * * *",
        "every 15 minutes, starting at 5 minutes past the hour",
    );
    check("0 9-17 * * *", "every hour from 09:00 to 17:00 every day");
    check(
        "0 9-17 * * mon-fri",
        "every hour from 09:00 to 17:00 on Monday to Friday",
    );
    check(
        "*/15 9-17 * * 1-5",
        "every 15 minutes from 09:00 to 17:45 on Monday to Friday",
    );
    check("* 9 * * *", "every minute from 09:00 to 09:59 every day");
    check("0,30 9 * * *", "at 09:00 and 09:30 every day");
    check("0 0,12 * * *", "at 00:00 and 12:00 every day");
    check("0 */8 * * *", "at 00:00, 08:00 and 16:00 every day");
    check("0 0 * 1-3 *", "at 00:00 every day in January to March");
    check("* * * 7 *", "every minute in July");
    check("0 * * * 1", "at the start of every hour on Monday");
    check("0 */6 * * *", "every 6 hours from 00:00 to 18:00");
    check(
        "5/15 * * * 1",
        "every 15 minutes, starting at 5 minutes past the hour, on Monday",
    );
}

#[test]
fn macros_read_as_their_expansion() {
    check("@yearly", "at 00:00 on 1 January");
    check("@annually", "at 00:00 on 1 January");
    check("@monthly", "at 00:00 on day 1 of the month");
    check("@weekly", "at 00:00 on Sunday");
    check("@daily", "at 00:00 every day");
    check("@midnight", "at 00:00 every day");
    check("@hourly", "at the start of every hour");
}

#[test]
fn seconds_lead_when_given() {
    check("* * * * * *", "every second");
    check("*/5 * * * * *", "every 5 seconds");
    check("0 * * * * *", "every minute");
    check("0 0 12 * * *", "at 12:00 every day");
    check("30 0 12 * * *", "at 12:00:30 every day");
    check("30 0 */2 * * *", "every 2 hours from 00:00:30 to 22:00:30");
    check("30 * * * * *", "at 30 seconds past every minute");
    check("0,30 * * * * *", "every 30 seconds");
    check(
        "10/20 * * * * *",
        "every 20 seconds, starting at 10 seconds past the minute",
    );
    check(
        "*/10 * 9-17 * * *",
        "every 10 seconds from 09:00:00 to 17:59:50 every day",
    );
    check("* 5 * * * *", "every second during minute 5 of every hour");
    check(
        "*/5 0-4 * * * *",
        "every 5 seconds during minutes 0 to 4 of every hour",
    );
    check(
        "30 * 3 * * *",
        "at 30 seconds past every minute of hour 3 every day",
    );
    check(
        "15,45 */10 * * * *",
        "every 30 seconds, starting at 15 seconds past the minute, during every 10th minute from 0 to 50 of every hour",
    );
    check(
        "15,40 */10 * * * *",
        "at seconds 15 and 40 past every 10th minute from 0 to 50 of every hour",
    );
}

#[test]
fn the_day_rule_reads_as_and_or_or() {
    // Both restricted: cronie's either.
    check("0 0 1 * 1", "at 00:00 on day 1 of the month or on Monday");
    check(
        "0 0 1,15 * Sun",
        "at 00:00 on days 1 and 15 of the month or on Sunday",
    );
    // One `*`-led: both must match.
    check(
        "43 9 */5 6 */7",
        "at 09:43 on every 5th day from day 1 to 31 of the month, if it falls on Sunday in June",
    );
    check(
        "0 0 */10 * 6,0",
        "at 00:00 on every 10th day from day 1 to 31 of the month, if it falls on Saturday or Sunday",
    );
    // A restricted field that allows every day leaves none out.
    check("0 0 1-31 * 1", "at 00:00 every day");
    check("0 0 1 * 0-6", "at 00:00 every day");
    check("0 0 ? * 1", "at 00:00 on Monday");
    check("0 0 1 * ?", "at 00:00 on day 1 of the month");
    check(
        "0 0 1-5,10 * *",
        "at 00:00 on days 1 to 5 and 10 of the month",
    );
    check(
        "0 0 1,15 3 *",
        "at 00:00 on days 1 and 15 of the month in March",
    );
    check("0 0 25 12 *", "at 00:00 on 25 December");
    check(
        "0 0 1 1,7 *",
        "at 00:00 on day 1 of the month in January and July",
    );
}

#[test]
fn quartz_extensions_read_as_what_they_pick() {
    check("0 0 L * *", "at 00:00 on the last day of the month");
    check("0 0 LW * *", "at 00:00 on the last weekday of the month");
    check(
        "0 0 15W * *",
        "at 00:00 on the weekday nearest day 15 of the month",
    );
    check(
        "0 0 1,L * *",
        "at 00:00 on day 1 and the last day of the month",
    );
    check("0 0 * * 2#2", "at 00:00 on the second Tuesday of the month");
    check("0 0 * * 5L", "at 00:00 on the last Friday of the month");
    check(
        "0 0 * * 1#1,5L",
        "at 00:00 on the first Monday and the last Friday of the month",
    );
    check(
        "0 0 L 2 *",
        "at 00:00 on the last day of the month in February",
    );
    check(
        "0 0 L * 1",
        "at 00:00 on the last day of the month or on Monday",
    );
}

#[test]
fn years_come_last() {
    check("0 0 0 1 1 * 2027", "at 00:00 on 1 January in 2027");
    check(
        "0 30 2 * * * 2027-2030",
        "at 02:30 every day in 2027 to 2030",
    );
    check(
        "0 0 12 * * 1-5 2027,2029",
        "at 12:00 on Monday to Friday in 2027 and 2029",
    );
    check(
        "0 0 0 * * * 2026-2034/4",
        "at 00:00 every day in every 4th year from 2026 to 2034",
    );
    check("0 0 0 * * * *", "at 00:00 every day");
}

#[test]
fn irregular_sets_read_back_value_by_value() {
    check(
        "3,17,44 1-5 * * *",
        "at minutes 3, 17 and 44 past hours 1 to 5 every day",
    );
    check(
        "*/7 * * * *",
        "at every 7th minute from 0 to 56 past every hour",
    );
    check("0-10 3 * * *", "at minutes 0 to 10 past hour 3 every day");
    check(
        "0 1-5,9 * * *",
        "at 01:00, 02:00, 03:00, 04:00, 05:00 and 09:00 every day",
    );
    check(
        "0 1-5,9-11 * * *",
        "at minute 0 past hours 1 to 5 and 9 to 11 every day",
    );
    check(
        "15 1,3,9,11,20,22,23 * * *",
        "at 15 minutes past hours 1, 3, 9, 11, 20, 22 and 23 every day",
    );
    check("0 */5 * * *", "every 5 hours from 00:00 to 20:00 every day");
    check(
        "0,30 */5 * * *",
        "every 30 minutes during every 5th hour from 0 to 20 every day",
    );
    check("*/25 * * * *", "at minutes 0, 25 and 50 past every hour");
    check(
        "0-10/2 * * * *",
        "at every 2nd minute from 0 to 10 past every hour",
    );
    check("* 1,3 * * *", "every minute during hours 1 and 3 every day");
    check(
        "5/15 1,3 * * *",
        "every 15 minutes, starting at 5 minutes past the hour, during hours 1 and 3 every day",
    );
}

#[test]
fn hashed_fields_read_as_what_they_picked() {
    let schedule = Schedule::parse(
        "H H(1-5) * * *",
        Zone::utc(),
        "report",
        DstPolicy::default(),
    )
    .expect("a valid expression");
    // "26 4 * * *" for the job "report" (the guide, "Schedules").
    assert_eq!(schedule.resolved(), "26 4 * * *");
    assert_eq!(schedule.describe(), "at 04:26 every day");
}

/// A small deterministic generator (xorshift) for the property test.
fn next(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

#[test]
fn every_valid_expression_has_a_reading() {
    let items: [&[&str]; 7] = [
        &["0", "*", "*/5", "10/20", "7,19,33", "0-9", "H", "30"],
        &[
            "0",
            "*",
            "*/15",
            "*/7",
            "5-10,30",
            "H",
            "0-59/3",
            "1,2,4,8,16,32",
        ],
        &[
            "0", "*", "*/2", "*/5", "9-17", "1,13", "H(0-5)", "0-23/7", "3",
        ],
        &[
            "*", "?", "1", "1,15", "L", "LW", "15W", "*/5", "1-31", "H", "31", "L,10",
        ],
        &["*", "1", "1-6", "*/3", "2,8", "jan-mar", "12"],
        &[
            "*", "?", "1-5", "0", "7", "5#2", "1L", "mon,fri", "0-6", "*/2", "2#1,5L",
        ],
        &["*", "2027", "2027-2030", "2026-2040/3", "2027,2029"],
    ];
    let mut state = 0x9e37_79b9_7f4a_7c15;
    let mut described = 0;
    for _ in 0..5000 {
        let mut fields: Vec<&str> = items
            .iter()
            .map(|choices| choices[(next(&mut state) % choices.len() as u64) as usize])
            .collect();
        match next(&mut state) % 3 {
            0 => fields = fields[1..6].to_vec(),
            1 => fields.truncate(6),
            _ => {}
        }
        let expression = fields.join(" ");
        let Ok(schedule) = Schedule::parse(&expression, Zone::utc(), "job", DstPolicy::default())
        else {
            continue;
        };
        let reading = schedule.describe();
        assert!(!reading.is_empty(), "{expression:?}");
        assert_eq!(reading.trim(), reading, "{expression:?}");
        assert!(!reading.contains("  "), "{expression:?}: {reading:?}");
        assert!(!reading.contains(",,"), "{expression:?}: {reading:?}");
        described += 1;
    }
    assert!(described > 3000, "only {described} expressions parsed");
}

/// The times of day (`HH:MM` or `HH:MM:SS` when `seconds`) at which
/// `schedule` fires on 2026-01-01, a day every generated expression
/// below allows.
fn one_day(schedule: &Schedule, seconds: bool) -> Vec<String> {
    let start = DateTime::parse_from_rfc3339("2025-12-31T23:59:59Z")
        .expect("a valid instant")
        .with_timezone(&Utc);
    let format = if seconds { "%H:%M:%S" } else { "%H:%M" };
    let mut times = Vec::new();
    let mut cursor = start;
    while let Some(tick) = schedule.next_after(cursor) {
        if tick.date_naive() != start.date_naive() + chrono::Days::new(1) {
            break;
        }
        times.push(tick.format(format).to_string());
        cursor = tick;
    }
    times
}

#[test]
fn clock_times_and_windows_are_the_ticks() {
    // Times of day only, every day: a reading that lists clock times
    // lists exactly the day's ticks; one with a window "from A to B"
    // has the day's first tick at A and its last at B.
    let seconds = ["0", "0", "30", "*/20", "5,10"];
    let minutes = [
        "0", "15", "*/15", "5/15", "0,30", "*", "3,17,44", "*/7", "H",
    ];
    let hours = [
        "9", "9-17", "*/2", "*/5", "1,13", "9,17", "0-3", "H(0-5)", "1-5,9",
    ];
    let (mut lists, mut windows) = (0, 0);
    for second in seconds {
        for minute in minutes {
            for hour in hours {
                let expression = format!("{second} {minute} {hour} * * *");
                let schedule =
                    Schedule::parse(&expression, Zone::utc(), "job", DstPolicy::default())
                        .unwrap_or_else(|e| panic!("{expression:?}: {e}"));
                let reading = schedule.describe();
                let with_seconds = second != "0";
                let day = one_day(&schedule, with_seconds);
                if let Some(list) = reading
                    .strip_prefix("at ")
                    .and_then(|rest| rest.strip_suffix(" every day"))
                    .filter(|list| {
                        list.split(' ')
                            .next()
                            .is_some_and(|word| word.contains(':'))
                    })
                {
                    let listed: Vec<&str> = list
                        .split([',', ' '])
                        .filter(|word| !word.is_empty() && *word != "and")
                        .collect();
                    assert_eq!(listed, day, "{expression:?} reads {reading:?}");
                    lists += 1;
                }
                if let Some((_, window)) = reading.split_once(" from ")
                    && let Some((first, rest)) = window.split_once(" to ")
                    && first.contains(':')
                {
                    let last = rest.split(' ').next().unwrap_or_default();
                    assert_eq!(
                        (first, last),
                        (day[0].as_str(), day[day.len() - 1].as_str()),
                        "{expression:?} reads {reading:?}"
                    );
                    windows += 1;
                }
            }
        }
    }
    assert!(
        lists >= 100 && windows >= 50,
        "{lists} lists, {windows} windows"
    );
}
