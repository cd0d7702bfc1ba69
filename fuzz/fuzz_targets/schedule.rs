//! The schedule parser and the tick search. The input is text, one item a
//! line: the cron expression, the time zone (empty: UTC), the job's name
//! (which seeds `H`), the instant to search after (seconds since the epoch)
//! and the DST policy (`skip` and/or `both` anywhere on the line). A
//! schedule that parses is described, and its next ticks are strictly
//! after their input and increasing.

#![no_main]

use chrono::DateTime;
use cronlease::schedule::{DstPolicy, Schedule, Zone};
use cronlease::{DstGap, DstRepeat};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|bytes: &[u8]| {
    let text = String::from_utf8_lossy(bytes);
    let mut lines = text.split('\n');
    let expression = lines.next().unwrap_or_default();
    let zone = match lines.next().unwrap_or_default() {
        "" => Zone::utc(),
        name => match Zone::parse(name) {
            Ok(zone) => zone,
            Err(error) => {
                let _ = error.to_string();
                return;
            }
        },
    };
    let job = lines.next().unwrap_or("job");
    let after = lines
        .next()
        .and_then(|secs| secs.trim().parse::<i64>().ok())
        .and_then(|secs| DateTime::from_timestamp(secs, 0))
        .unwrap_or(DateTime::from_timestamp(1_767_225_600, 0).expect("2026-01-01 is a date"));
    let policy = lines.next().unwrap_or_default();
    let dst = DstPolicy {
        gap: if policy.contains("skip") {
            DstGap::Skip
        } else {
            DstGap::RunAfter
        },
        repeat: if policy.contains("both") {
            DstRepeat::Both
        } else {
            DstRepeat::First
        },
    };
    let schedule = match Schedule::parse(expression, zone, job, dst) {
        Ok(schedule) => schedule,
        Err(error) => {
            let _ = error.to_string();
            return;
        }
    };
    let _ = schedule.describe();
    let _ = schedule.resolved();
    let _ = format!("{schedule:?}");
    let mut cursor = after;
    for tick in schedule.upcoming(after, 4) {
        assert!(
            tick > cursor,
            "{expression:?}: tick {tick} not after {cursor}"
        );
        let _ = schedule.timezone().format_local(tick);
        cursor = tick;
    }
});
