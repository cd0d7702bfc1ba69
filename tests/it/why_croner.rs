//! Why the schedule module uses croner and not the `cron` crate: these tests
//! pin down the three defects of `cron` 0.17 that ARCHITECTURE.md cites, so
//! the decision is re-examined if a new `cron` release fixes them.

use std::str::FromStr;

use chrono::{Datelike, TimeZone, Utc, Weekday};
use chrono_tz::Europe::Berlin;

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
