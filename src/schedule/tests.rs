//! The schedule's data-driven tests: DST vectors, the day rule, H, ended
//! schedules and error messages, through one `check(expression, zone,
//! from, expected)` helper.

use super::*;

fn utc(text: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(text)
        .expect("test instants are RFC 3339")
        .with_timezone(&Utc)
}

/// The one helper of the data-driven tests: the ticks of `expression`
/// (default DST policy unless `dst` says otherwise) in `zone` strictly
/// after `from` are `expected`, in UTC.
#[track_caller]
fn check_with(expression: &str, zone: &str, dst: DstPolicy, from: &str, expected: &[&str]) {
    let zone = Zone::parse(zone).expect("test zones exist");
    let schedule = Schedule::parse(expression, zone.clone(), "job", dst)
        .unwrap_or_else(|e| panic!("{expression:?}: {e}"));
    let got: Vec<String> = schedule
        .upcoming(utc(from), expected.len())
        .into_iter()
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
        .collect();
    assert_eq!(
        got,
        expected,
        "{expression:?} in {} from {from}",
        zone.name()
    );
}

#[track_caller]
fn check(expression: &str, zone: &str, from: &str, expected: &[&str]) {
    check_with(expression, zone, DstPolicy::default(), from, expected);
}

const NY: &str = "America/New_York";

#[test]
fn fixed_time_jobs_follow_cronie_through_dst() {
    // New York, 2026-11-01: 02:00 EDT falls back to 01:00 EST. A list in
    // the hour is a fixed time: 01:30 runs once, the first time.
    check(
        "30 1,13 * * *",
        NY,
        "2026-11-01T00:00:00Z",
        &["2026-11-01T05:30:00Z", "2026-11-01T18:30:00Z"],
    );
    // 2026-03-08: 02:00 EST jumps to 03:00 EDT; a range's 02:30 runs at 03:00.
    check(
        "30 1-2 * * *",
        NY,
        "2026-03-08T00:00:00Z",
        &[
            "2026-03-08T06:30:00Z",
            "2026-03-08T07:00:00Z",
            "2026-03-09T05:30:00Z",
        ],
    );
    // Several times swallowed by one gap run once, at its end.
    check(
        "0,30 2 * * *",
        NY,
        "2026-03-08T00:00:00Z",
        &["2026-03-08T07:00:00Z", "2026-03-09T06:00:00Z"],
    );
    // ... and so does a time at the gap's end together with them: 02:00
    // and 03:00 EDT are one instant, one tick.
    check(
        "0 2,3 * * *",
        NY,
        "2026-03-08T00:00:00Z",
        &["2026-03-08T07:00:00Z", "2026-03-09T06:00:00Z"],
    );
    // A step in the hour is fixed-time: 00:00, 02:00 (→ 03:00 EDT), 04:00.
    check(
        "0 0-23/2 * * *",
        NY,
        "2026-03-08T04:00:00Z",
        &[
            "2026-03-08T05:00:00Z",
            "2026-03-08T07:00:00Z",
            "2026-03-08T08:00:00Z",
        ],
    );
    // On the fall-back day the 00:00 and 02:00 EST ... the repeated 01:xx is not in the list.
    check(
        "0 0-23/2 * * *",
        NY,
        "2026-11-01T03:00:00Z",
        &["2026-11-01T04:00:00Z", "2026-11-01T07:00:00Z"],
    );
    // Multi-minute lists inside one repeated hour run once each.
    check(
        "21-22 1 * * *",
        NY,
        "2026-11-01T00:00:00Z",
        &[
            "2026-11-01T05:21:00Z",
            "2026-11-01T05:22:00Z",
            "2026-11-02T06:21:00Z",
        ],
    );
    // Berlin, 2026-03-29 and 2026-10-25.
    check(
        "30 2 * * *",
        "Europe/Berlin",
        "2026-03-28T12:00:00Z",
        &["2026-03-29T01:00:00Z", "2026-03-30T00:30:00Z"],
    );
    check(
        "30 2 * * *",
        "Europe/Berlin",
        "2026-10-24T12:00:00Z",
        &["2026-10-25T00:30:00Z", "2026-10-26T01:30:00Z"],
    );
    // Lord Howe moves by 30 minutes: 02:00 → 02:30 on 2026-10-04 and
    // 02:00 → 01:30 on 2027-04-04.
    check(
        "15 2 * * *",
        "Australia/Lord_Howe",
        "2026-10-03T00:00:00Z",
        &["2026-10-03T15:30:00Z", "2026-10-04T15:15:00Z"],
    );
    check(
        "45 1 * * *",
        "Australia/Lord_Howe",
        "2027-04-03T00:00:00Z",
        &["2027-04-03T14:45:00Z", "2027-04-04T15:15:00Z"],
    );
    check(
        "45 * * * *",
        "Australia/Lord_Howe",
        "2027-04-03T14:00:00Z",
        &[
            "2027-04-03T14:45:00Z",
            "2027-04-03T15:15:00Z",
            "2027-04-03T16:15:00Z",
        ],
    );
    // Chatham: 02:45 +12:45 → 03:45 +13:45 on 2026-09-27 (14:00Z the day
    // before): 03:00 is in the gap and runs at 03:45.
    check(
        "0 3 * * *",
        "Pacific/Chatham",
        "2026-09-26T00:00:00Z",
        &["2026-09-26T14:00:00Z", "2026-09-27T13:15:00Z"],
    );
    check(
        "0 3 27 9 *",
        "Pacific/Chatham",
        "2026-09-26T00:00:00Z",
        &["2026-09-26T14:00:00Z"],
    );
}

#[test]
fn wall_clock_jobs_take_the_clock_as_it_is() {
    // `*`-led hour: 01:30 EDT and 01:30 EST both run.
    check(
        "30 * * * *",
        NY,
        "2026-11-01T05:00:00Z",
        &[
            "2026-11-01T05:30:00Z",
            "2026-11-01T06:30:00Z",
            "2026-11-01T07:30:00Z",
        ],
    );
    check(
        "*/30 * * * *",
        NY,
        "2026-11-01T04:45:00Z",
        &[
            "2026-11-01T05:00:00Z",
            "2026-11-01T05:30:00Z",
            "2026-11-01T06:00:00Z",
            "2026-11-01T06:30:00Z",
        ],
    );
    // The gap's local times do not exist and do not run.
    check(
        "30 * * * *",
        NY,
        "2026-03-08T06:00:00Z",
        &["2026-03-08T06:30:00Z", "2026-03-08T07:30:00Z"],
    );
    check(
        "0 * * * *",
        "Europe/Berlin",
        "2026-03-28T23:30:00Z",
        &[
            "2026-03-29T00:00:00Z",
            "2026-03-29T01:00:00Z",
            "2026-03-29T02:00:00Z",
        ],
    );
    // `*`-led minute with a fixed hour: wall clock too.
    check(
        "*/20 1 * * *",
        NY,
        "2026-11-01T05:50:00Z",
        &[
            "2026-11-01T06:00:00Z",
            "2026-11-01T06:20:00Z",
            "2026-11-01T06:40:00Z",
            "2026-11-02T06:00:00Z",
        ],
    );
}

#[test]
fn the_dst_policy_changes_fixed_time_jobs() {
    let skip = DstPolicy {
        gap: DstGap::Skip,
        repeat: DstRepeat::First,
    };
    let both = DstPolicy {
        gap: DstGap::RunAfter,
        repeat: DstRepeat::Both,
    };
    check_with(
        "30 2 * * *",
        NY,
        skip,
        "2026-03-07T12:00:00Z",
        &["2026-03-09T06:30:00Z"],
    );
    check_with(
        "0 3 * * *",
        NY,
        skip,
        "2026-03-08T00:00:00Z",
        &["2026-03-08T07:00:00Z"],
    );
    check_with(
        "30 1 * * *",
        NY,
        both,
        "2026-11-01T00:00:00Z",
        &[
            "2026-11-01T05:30:00Z",
            "2026-11-01T06:30:00Z",
            "2026-11-02T06:30:00Z",
        ],
    );
}

#[test]
fn the_day_fields_combine_as_crontab_says() {
    // Both restricted: either. 2026-11-01 is a Sunday.
    check(
        "0 0 1,15 * Sun",
        "UTC",
        "2026-10-31T12:00:00Z",
        &[
            "2026-11-01T00:00:00Z",
            "2026-11-08T00:00:00Z",
            "2026-11-15T00:00:00Z",
            "2026-11-22T00:00:00Z",
        ],
    );
    // One `*`-led (even `*/5`): both must match. June days 1,6,11,… that are Sundays.
    check(
        "43 9 */5 6 */7",
        "UTC",
        "2026-01-01T00:00:00Z",
        &["2026-06-21T09:43:00Z", "2027-06-06T09:43:00Z"],
    );
    check(
        "0 0 */10 * Sun",
        "UTC",
        "2026-01-01T00:00:00Z",
        &[
            "2026-01-11T00:00:00Z",
            "2026-02-01T00:00:00Z",
            "2026-03-01T00:00:00Z",
            "2026-05-31T00:00:00Z",
        ],
    );
    // x-0 is x-7: Friday to Sunday.
    check(
        "0 0 * * 5-0",
        "UTC",
        "2026-11-23T00:00:00Z",
        &[
            "2026-11-27T00:00:00Z",
            "2026-11-28T00:00:00Z",
            "2026-11-29T00:00:00Z",
            "2026-12-04T00:00:00Z",
        ],
    );
    check(
        "0 0 * * fri-sun",
        "UTC",
        "2026-11-23T00:00:00Z",
        &[
            "2026-11-27T00:00:00Z",
            "2026-11-28T00:00:00Z",
            "2026-11-29T00:00:00Z",
        ],
    );
    // Quartz extensions.
    check(
        "0 0 L * *",
        "UTC",
        "2026-02-01T00:00:00Z",
        &["2026-02-28T00:00:00Z", "2026-03-31T00:00:00Z"],
    );
    check(
        "0 0 15W * *",
        "UTC",
        "2026-08-01T00:00:00Z",
        &["2026-08-14T00:00:00Z"],
    );
    check(
        "0 0 1W * *",
        "UTC",
        "2026-08-01T00:00:00Z",
        &["2026-08-03T00:00:00Z", "2026-09-01T00:00:00Z"],
    );
    check(
        "0 0 LW * *",
        "UTC",
        "2026-05-01T00:00:00Z",
        &["2026-05-29T00:00:00Z", "2026-06-30T00:00:00Z"],
    );
    check(
        "0 0 * * 5#2",
        "UTC",
        "2026-11-01T00:00:00Z",
        &["2026-11-13T00:00:00Z", "2026-12-11T00:00:00Z"],
    );
    check(
        "0 0 * * 5L",
        "UTC",
        "2026-11-01T00:00:00Z",
        &["2026-11-27T00:00:00Z", "2026-12-25T00:00:00Z"],
    );
}

#[test]
fn years_past_2099_keep_their_daylight_saving_time() {
    check(
        "0 0 12 1 7 * 2100",
        NY,
        "2026-01-01T00:00:00Z",
        &["2100-07-01T16:00:00Z"],
    );
    check(
        "0 0 12 1 1 * 9999",
        NY,
        "2026-01-01T00:00:00Z",
        &["9999-01-01T17:00:00Z"],
    );
}

#[test]
fn upcoming_counts_strictly_after() {
    check(
        "0 * * * *",
        "UTC",
        "2026-01-01T01:00:00Z",
        &["2026-01-01T02:00:00Z", "2026-01-01T03:00:00Z"],
    );
    check(
        "*/20 * * * * *",
        "UTC",
        "2026-01-01T00:00:00Z",
        &[
            "2026-01-01T00:00:20Z",
            "2026-01-01T00:00:40Z",
            "2026-01-01T00:01:00Z",
        ],
    );
}

#[test]
fn macros_mean_what_crontab_says() {
    let from = "2026-11-21T12:00:00Z"; // a Saturday
    check("@yearly", "UTC", from, &["2027-01-01T00:00:00Z"]);
    check("@monthly", "UTC", from, &["2026-12-01T00:00:00Z"]);
    check("@weekly", "UTC", from, &["2026-11-22T00:00:00Z"]);
    check("@daily", "UTC", from, &["2026-11-22T00:00:00Z"]);
    check("@HOURLY", "UTC", from, &["2026-11-21T13:00:00Z"]);
}

#[test]
fn a_year_that_has_passed_is_valid_and_has_no_next_tick() {
    let schedule = Schedule::parse(
        "0 0 12 1 6 * 2020",
        Zone::utc(),
        "job",
        DstPolicy::default(),
    )
    .unwrap();
    assert_eq!(schedule.next_after(utc("2026-01-01T00:00:00Z")), None);
    assert_eq!(schedule.last_year(), Some(2020));
    assert_eq!(
        schedule.next_after(utc("2019-01-01T00:00:00Z")),
        Some(utc("2020-06-01T12:00:00Z"))
    );
}

#[test]
fn hashed_values_depend_on_the_job_and_stay_in_range() {
    let resolved = |expression: &str, job: &str| {
        Schedule::parse(expression, Zone::utc(), job, DstPolicy::default())
            .unwrap_or_else(|e| panic!("{expression:?}: {e}"))
            .resolved()
            .to_string()
    };
    assert_eq!(resolved("H H * * *", "draw"), resolved("H H * * *", "draw"));
    let spread: std::collections::BTreeSet<String> = (0..500)
        .map(|i| resolved("H * * * *", &format!("job-{i}")))
        .collect();
    assert!(
        spread.len() > 50,
        "500 hourly jobs spread over {} minutes",
        spread.len()
    );
    for i in 0..200 {
        let job = format!("job-{i}");
        let text = resolved("H H H(0-5) H H/3 H(1-5) H(2027-2030)", &job);
        let fields: Vec<&str> = text.split(' ').collect();
        let number = |index: usize| fields[index].parse::<u32>().unwrap();
        assert!(number(0) < 60 && number(1) < 60 && number(2) <= 5, "{text}");
        assert!(
            (1..=28).contains(&number(3)) && fields[4].ends_with("-12/3"),
            "{text}"
        );
        assert!(
            (1..=5).contains(&number(5)) && (2027..=2030).contains(&number(6)),
            "{text}"
        );
        // The resolved text is itself an expression with the same ticks.
        assert_eq!(resolved(&text, "another"), text);
    }
    assert_eq!(resolved("0 12 * * *", "draw"), "0 12 * * *");
    assert_eq!(
        resolved("H/15 * * * *", "draw")
            .split(' ')
            .next()
            .map(|m| m.ends_with("-59/15")),
        Some(true)
    );
}

#[test]
fn errors_name_the_problem() {
    let check = |expr: &str, fragment: &str| {
        let err = Schedule::parse(expr, Zone::utc(), "job", DstPolicy::default()).unwrap_err();
        assert!(err.to_string().contains(fragment), "{expr}: {err}");
    };
    check("", "empty schedule");
    check("* * *", "3 fields");
    check("0 25 * * *", "hour 25 is out of range 0-23");
    check("0 0 0 * * 8", "day-of-week 8 is out of range 0-7");
    check("0 0 1 13 *", "month 13 is out of range 1-12");
    check("0 0 * * MON-FOO", "unknown name \"FOO\"");
    check("0 0 * * monday", "unknown name");
    check("0 0 30 2 *", "day-of-month 30 never occurs in February");
    check("0 0 31 4,6 *", "never occurs in April or June");
    check("0 0 0 29 2 * 2027", "never fires");
    check("0 0 0 1 1 * 10000", "year 10000 is out of range 1970-9999");
    check("0 22-2 * * *", "runs backwards");
    check("0-70/100 * * * *", "minute 70 is out of range 0-59");
    check("0~30 * * * *", "use H");
    check("*/0 * * * *", "a step of 0");
    check("1,,2 * * * *", "empty list item");
    check("*5 * * * *", "is not valid");
    check("0 0 * jan-foo *", "unknown name");
    check("0 0 * * 1#6", "must be 1-5");
    check("0 0 * * * * H", "bare H in the year field");
    check("@every 5m", "unknown macro");
    check("@reboot", "not supported");
}

#[test]
fn time_zone_typos_get_a_suggestion() {
    let message = |name: &str| {
        Zone::parse(name)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default()
    };
    assert!(message("Europe/Berln").contains("did you mean \"Europe/Berlin\""));
    assert!(message("Nowhere").contains("unknown time zone"));
    assert!(!message("Nowhere").contains("did you mean"));
    assert_eq!(Zone::parse("america/new_york").unwrap().name(), NY);
}
