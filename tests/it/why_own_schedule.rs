//! Why the schedule module computes ticks itself instead of using the `cron`
//! or `croner` crate: these tests pin down the defects of `cron` 0.17 and
//! `croner` 4 that ARCHITECTURE.md cites, each a disagreement with
//! crontab(5)/cronie that breaks "a tick runs once" or runs on the wrong
//! days, so the decision is re-examined if a new release fixes them.

use std::str::FromStr;

use chrono::{DateTime, Datelike, TimeZone, Utc, Weekday};
use chrono_tz::America::New_York;
use chrono_tz::Europe::Berlin;
use croner::parser::{CronParser, Seconds};

#[test]
fn cron_0_17_rejects_five_field_crontab_lines() {
    assert!(cron::Schedule::from_str("0 12 * * *").is_err());
}

#[test]
fn cron_0_17_numbers_weekdays_from_sunday_1() {
    let schedule = cron::Schedule::from_str("0 0 9 * * 1-5").unwrap();
    let from = Utc.with_ymd_and_hms(2026, 11, 21, 0, 0, 0).unwrap(); // a Saturday
    let days: Vec<Weekday> = schedule.after(&from).take(5).map(|t| t.weekday()).collect();
    assert_eq!(
        days,
        [
            Weekday::Sun,
            Weekday::Mon,
            Weekday::Tue,
            Weekday::Wed,
            Weekday::Thu
        ]
    );
}

#[test]
fn cron_0_17_fires_a_fixed_time_twice_on_a_fall_back_day() {
    let schedule = cron::Schedule::from_str("0 30 2 * * *").unwrap();
    let from = Berlin.with_ymd_and_hms(2026, 10, 24, 12, 0, 0).unwrap();
    let on_the_day = schedule.after(&from).take_while(|t| t.day() == 25).count();
    assert_eq!(on_the_day, 2);
}

/// croner's ticks of `expression` in New York from `from`, in UTC.
fn croner_ticks(expression: &str, from: DateTime<Utc>, count: usize) -> Vec<String> {
    let cron = CronParser::builder()
        .seconds(Seconds::Optional)
        .build()
        .parse(expression)
        .unwrap();
    let mut cursor = from.with_timezone(&New_York);
    let mut ticks = Vec::new();
    for _ in 0..count {
        cursor = cron.find_next_occurrence(&cursor, false).unwrap();
        ticks.push(
            cursor
                .with_timezone(&Utc)
                .format("%Y-%m-%dT%H:%MZ")
                .to_string(),
        );
    }
    ticks
}

#[test]
fn croner_4_runs_a_listed_hour_twice_on_a_fall_back_day() {
    // cronie: once at 01:30 EDT (05:30Z), then 13:30 EST.
    let from = Utc.with_ymd_and_hms(2026, 11, 1, 0, 0, 0).unwrap();
    assert_eq!(
        croner_ticks("30 1,13 * * *", from, 2),
        ["2026-11-01T05:30Z", "2026-11-01T06:30Z"]
    );
}

#[test]
fn croner_4_drops_a_ranged_hour_that_falls_into_a_gap() {
    // cronie: 01:30 EST, then 02:30 (in the gap) at 03:00 EDT = 07:00Z.
    let from = Utc.with_ymd_and_hms(2026, 3, 8, 0, 0, 0).unwrap();
    assert_eq!(
        croner_ticks("30 1-2 * * *", from, 2),
        ["2026-03-08T06:30Z", "2026-03-09T05:30Z"]
    );
}

#[test]
fn croner_4_reads_star_step_day_fields_as_either() {
    // crontab(5): `*/5` starts with `*`, so a day must match both fields:
    // the first June day in 1,6,11,… that is a Sunday is 2026-06-21.
    let from = Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap();
    assert_eq!(
        croner_ticks("43 9 */5 6 */7", from, 1),
        ["2026-06-01T13:43Z"]
    );
}

#[test]
fn croner_4_refuses_cronies_weekday_range_to_0() {
    let parsed = CronParser::builder().build().parse("0 0 * * 5-0");
    assert!(parsed.is_err());
}

#[test]
fn chrono_tz_0_10_forgets_daylight_saving_time_after_2099() {
    let july_2100 = New_York.with_ymd_and_hms(2100, 7, 1, 12, 0, 0).unwrap();
    assert_eq!(july_2100.with_timezone(&Utc).format("%H").to_string(), "17");
}
