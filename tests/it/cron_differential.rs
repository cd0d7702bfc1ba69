//! Differential tests of cronlease's schedule engine against the cronie
//! reference model (`cron_reference`): when jobs fire, across DST changes in
//! zones with half-hour and 45-minute offsets and shifts, and which
//! expressions are accepted.
//!
//! The model is written from cronie's source, not from cronlease's, so an
//! agreement here is evidence that cronlease behaves as Vixie cron does.
//! Expressions are drawn at random from a generator biased towards the
//! corners (lists, steps, names, both day fields, fixed times inside DST
//! gaps and repeats, sparse dates), from a seed printed by each test and
//! overridable with `CRONLEASE_CRON_SEED` to explore. Many jobs share one
//! config and one `cronlease check` run, so thousands of comparisons take
//! seconds. Disagreements are collected and reported together, each with
//! what is needed to replay it.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::fmt::Write as _;
use std::time::{Duration, Instant};

use chrono::{DateTime, Datelike, Offset, SecondsFormat, TimeZone, Timelike, Utc};
use chrono_tz::Tz;
use serde_json::Value;

use crate::cron_reference::{
    DEVIATIONS, Deviation, DstGap, DstPolicy, DstRepeat, RefSchedule, cronlease_extension, fires,
    parse, parse_as_cronlease,
};
use crate::support::{ConfigFile, REDIS_SECTION, Run, cronlease, toml_string};

/// The seed when `CRONLEASE_CRON_SEED` is not set.
const DEFAULT_SEED: u64 = 20_261_101;

/// The zones the random tests draw from: half-hour and 45-minute offsets,
/// a half-hour DST shift (Lord Howe), transitions at 02:45 (Chatham), at
/// midnight (Sao Paulo until 2019) and a minute past midnight (St John's
/// until 2011), southern and northern hemispheres, and zones without DST.
const ZONES: [&str; 8] = [
    "Australia/Lord_Howe",
    "Pacific/Chatham",
    "America/Sao_Paulo",
    "Asia/Kolkata",
    "America/New_York",
    "Europe/Berlin",
    "UTC",
    "America/St_Johns",
];

/// Years the random tests use: chrono-tz's rules end in 2099, and cronie's
/// "large" clock changes (deviation a) never happen in these zones then.
const FIRST_TEST_YEAR: i32 = 2000;
const LAST_TEST_YEAR: i32 = 2090;

/// `check --count`: its maximum, so dense expressions cover most of a
/// window.
const NEXT_COUNT: usize = 1000;

/// How far after the start instant fire times are compared…
const WINDOW: Duration = Duration::from_secs(3 * 24 * 3600);
/// …or, for expressions firing fewer than `SPARSE_FIRES` times in it, this
/// far.
const SPARSE_WINDOW: Duration = Duration::from_secs(40 * 24 * 3600);
const SPARSE_FIRES: usize = 3;

/// Start instants per DST zone, ordinary start instants, jobs per start.
const TRANSITION_STARTS_PER_ZONE: usize = 8;
const ORDINARY_STARTS: usize = 12;
const JOBS_PER_START: usize = 50;

/// Random expressions in the acceptance test.
const ACCEPTANCE_EXPRESSIONS: usize = 3000;

/// At most this many disagreements are shown when a test fails.
const SHOWN_DISAGREEMENTS: usize = 20;

// ---------------------------------------------------------------------------
// Randomness.

/// splitmix64: small, seedable, and the same on every platform, so a seed
/// replays the same expressions anywhere.
struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    fn new(seed: u64) -> SplitMix64 {
        SplitMix64 { state: seed }
    }

    fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut mixed = self.state;
        mixed = (mixed ^ (mixed >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        mixed = (mixed ^ (mixed >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        mixed ^ (mixed >> 31)
    }

    /// Uniform in `0..bound` (the modulo bias is immaterial here).
    fn below(&mut self, bound: u64) -> u64 {
        self.next_u64() % bound.max(1)
    }

    /// Uniform in `low..=high`.
    fn between(&mut self, low: i64, high: i64) -> i64 {
        low + self.below((high - low + 1) as u64) as i64
    }

    fn percent(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }
}

/// The seed from `CRONLEASE_CRON_SEED` (decimal or `0x` hex) or the
/// default; printed so that a failure can be replayed.
fn seed(test: &str) -> u64 {
    let seed = match std::env::var("CRONLEASE_CRON_SEED") {
        Ok(text) => {
            let text = text.trim();
            let parsed = match text.strip_prefix("0x") {
                Some(hex) => u64::from_str_radix(hex, 16),
                None => text.parse(),
            };
            parsed.unwrap_or_else(|e| panic!("CRONLEASE_CRON_SEED={text:?} is not a u64: {e}"))
        }
        Err(_) => DEFAULT_SEED,
    };
    println!("{test}: seed {seed} (replay with CRONLEASE_CRON_SEED={seed})");
    seed
}

// ---------------------------------------------------------------------------
// Running `cronlease check`.

/// One job of a generated config.
struct Job {
    name: String,
    expression: String,
    zone: Tz,
    policy: DstPolicy,
    /// Whether `dst_gap`/`dst_repeat` are written even when they are the
    /// default (cronlease must accept the defaults spelled out).
    spell_out_policy: bool,
}

impl Job {
    fn table(&self) -> String {
        let mut table = format!(
            "[jobs.{}]\nschedule = {}\ntimezone = {}\ncommand = [\"true\"]\n",
            self.name,
            toml_string(&self.expression),
            toml_string(self.zone.name()),
        );
        if self.policy.gap != DstGap::RunAfter || self.spell_out_policy {
            let _ = writeln!(table, "dst_gap = \"{}\"", gap_name(self.policy.gap));
        }
        if self.policy.repeat != DstRepeat::First || self.spell_out_policy {
            let _ = writeln!(
                table,
                "dst_repeat = \"{}\"",
                repeat_name(self.policy.repeat)
            );
        }
        table
    }
}

fn gap_name(gap: DstGap) -> &'static str {
    match gap {
        DstGap::RunAfter => "run_after",
        DstGap::Skip => "skip",
    }
}

fn repeat_name(repeat: DstRepeat) -> &'static str {
    match repeat {
        DstRepeat::First => "first",
        DstRepeat::Both => "both",
    }
}

fn config_text<'a>(jobs: impl IntoIterator<Item = &'a Job>) -> String {
    let mut text = REDIS_SECTION.to_owned();
    for job in jobs {
        text.push('\n');
        text.push_str(&job.table());
    }
    text
}

fn rfc3339(instant: DateTime<Utc>) -> String {
    instant.to_rfc3339_opts(SecondsFormat::Secs, true)
}

fn parse_instant(text: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(text)
        .unwrap_or_else(|e| panic!("{text:?} is not RFC 3339: {e}"))
        .with_timezone(&Utc)
}

/// Runs `cronlease check --config FILE --json --from FROM --count COUNT`.
fn check_config(file: &ConfigFile, from: DateTime<Utc>, count: usize) -> Run {
    let args: Vec<OsString> = vec![
        "check".into(),
        "--config".into(),
        file.path().into(),
        "--from".into(),
        rfc3339(from).into(),
        "--count".into(),
        count.to_string().into(),
        "--json".into(),
    ];
    cronlease(args)
}

/// The jobs a refused config's problem lines name, with their lines:
/// `  FILE:LINE:COLUMN: job "NAME", field `schedule`: …`.
fn refused_jobs(stderr: &str) -> BTreeMap<String, String> {
    let mut refused = BTreeMap::new();
    for line in stderr.lines() {
        if let Some((_, rest)) = line.split_once("job \"")
            && let Some((name, _)) = rest.split_once('"')
        {
            refused
                .entry(name.to_owned())
                .or_insert_with(|| line.trim().to_owned());
        }
    }
    refused
}

/// What `check --json` says about one job.
struct CheckedJob {
    timing: Option<String>,
    dst_gap: Option<String>,
    dst_repeat: Option<String>,
    next: Vec<DateTime<Utc>>,
}

fn checked_jobs(run: &Run) -> BTreeMap<String, CheckedJob> {
    let json: Value = serde_json::from_str(&run.stdout())
        .unwrap_or_else(|e| panic!("check --json printed no JSON: {e}\n{}", run.describe()));
    let jobs = json["jobs"]
        .as_array()
        .unwrap_or_else(|| panic!("no \"jobs\" array\n{}", run.describe()));
    let text = |job: &Value, key: &str| job[key].as_str().map(str::to_owned);
    jobs.iter()
        .map(|job| {
            let name = text(job, "name").unwrap_or_else(|| panic!("a job without a name: {job}"));
            let next = job["next"]
                .as_array()
                .unwrap_or_else(|| panic!("job {name}: no \"next\" array: {job}"))
                .iter()
                .map(|instant| parse_instant(instant.as_str().unwrap_or_default()))
                .collect();
            let checked = CheckedJob {
                timing: text(job, "timing"),
                dst_gap: text(job, "dst_gap"),
                dst_repeat: text(job, "dst_repeat"),
                next,
            };
            (name, checked)
        })
        .collect()
}

// ---------------------------------------------------------------------------
// DST transitions and start instants.

fn zone(name: &str) -> Tz {
    name.parse()
        .unwrap_or_else(|e| panic!("chrono-tz does not know {name:?}: {e}"))
}

fn offset_seconds(zone: Tz, instant: DateTime<Utc>) -> i32 {
    zone.offset_from_utc_datetime(&instant.naive_utc())
        .fix()
        .local_minus_utc()
}

/// The instants in `year` at which `zone`'s offset changes: offsets looked
/// up daily (no zone changes twice within a day), then bisected to the
/// minute.
fn transitions_in_year(zone: Tz, year: i32) -> Vec<DateTime<Utc>> {
    let start = Utc
        .with_ymd_and_hms(year, 1, 1, 0, 0, 0)
        .single()
        .expect("1 January exists");
    let day = chrono::Duration::days(1);
    let mut transitions = Vec::new();
    let mut sampled = start;
    let mut sampled_offset = offset_seconds(zone, sampled);
    while sampled.year() == year {
        let next = sampled + day;
        let next_offset = offset_seconds(zone, next);
        if next_offset != sampled_offset {
            let (mut before, mut after) = (sampled, next);
            while after - before > chrono::Duration::minutes(1) {
                let middle = before + (after - before) / 2;
                let middle = middle - chrono::Duration::seconds(i64::from(middle.second()));
                if offset_seconds(zone, middle) == sampled_offset {
                    before = middle;
                } else {
                    after = middle;
                }
            }
            transitions.push(after);
        }
        sampled = next;
        sampled_offset = next_offset;
    }
    transitions
}

/// Where a batch of jobs starts: `from`, in `zone` (most jobs of the batch
/// use it), near `transition` when there is one.
struct StartInstant {
    zone: Tz,
    from: DateTime<Utc>,
    transition: Option<DateTime<Utc>>,
}

fn random_instant(rng: &mut SplitMix64) -> DateTime<Utc> {
    let first = Utc
        .with_ymd_and_hms(FIRST_TEST_YEAR, 1, 1, 0, 0, 0)
        .single()
        .expect("exists");
    let last = Utc
        .with_ymd_and_hms(LAST_TEST_YEAR, 12, 1, 0, 0, 0)
        .single()
        .expect("exists");
    let seconds = rng.between(0, (last - first).num_seconds());
    first + chrono::Duration::seconds(seconds)
}

/// Start instants a little before DST transitions of each zone that has
/// them (in random years), and ordinary ones.
fn start_instants(rng: &mut SplitMix64) -> Vec<StartInstant> {
    let mut starts = Vec::new();
    for name in ZONES {
        let zone = zone(name);
        // Sao Paulo has had no DST since 2019.
        let last_year = if name == "America/Sao_Paulo" {
            2018
        } else {
            LAST_TEST_YEAR
        };
        let mut found = 0;
        let mut attempts = 0;
        while found < TRANSITION_STARTS_PER_ZONE && attempts < 3 * TRANSITION_STARTS_PER_ZONE {
            attempts += 1;
            let year = rng.between(i64::from(FIRST_TEST_YEAR), i64::from(last_year)) as i32;
            let transitions = transitions_in_year(zone, year);
            if transitions.is_empty() {
                break; // a zone without DST
            }
            let transition = *rng.pick(&transitions);
            // Mostly some hours before the change; sometimes just before or
            // after it, inside a repeated hour, where fixed-time jobs that
            // ran the first time must not run again.
            let minutes_before = if rng.percent(70) {
                rng.between(1, 40 * 60)
            } else {
                rng.between(-90, 90)
            };
            let seconds = if rng.percent(50) {
                0
            } else {
                rng.between(1, 59)
            };
            let from = transition - chrono::Duration::minutes(minutes_before)
                + chrono::Duration::seconds(seconds);
            starts.push(StartInstant {
                zone,
                from,
                transition: Some(transition),
            });
            found += 1;
        }
    }
    for _ in 0..ORDINARY_STARTS {
        let name = *rng.pick(&ZONES);
        let zone = zone(name);
        starts.push(StartInstant {
            zone,
            from: random_instant(rng),
            transition: None,
        });
    }
    starts
}

// ---------------------------------------------------------------------------
// The expression generator for the schedule comparison.

/// What the generator aims at: the local date and wall times around a
/// transition, or around the start instant.
struct Target {
    year: i32,
    month: u32,
    day: u32,
    /// Local hours and minutes worth hitting (either side of a change).
    hours: Vec<i64>,
    minutes: Vec<i64>,
    /// Wall times (hour, minute) from the last before a change at `around`
    /// to the first after it: the times it skips or repeats, and their
    /// edges; empty when the clock runs on.
    changed: Vec<(i64, i64)>,
}

impl Target {
    fn new(rng: &mut SplitMix64, zone: Tz, around: DateTime<Utc>) -> Target {
        let before = around - chrono::Duration::minutes(1);
        let local_before = before.with_timezone(&zone);
        let local_after = around.with_timezone(&zone);
        let mut hours = vec![0, 1, 2, 3, 23, 12];
        let mut minutes = vec![0, 30, 45, 15, 59, 1, 29, 44, 50];
        for local in [local_before, local_after] {
            hours.push(i64::from(local.hour()));
            minutes.push(i64::from(local.minute()));
        }
        // Between the wall minute the clock leaves and the one it jumps to
        // lie the skipped (forward) or repeated (backward) ones.
        let wall_before = local_before.naive_local();
        let wall_after = local_after.naive_local();
        let (first, last) = if wall_after > wall_before {
            (wall_before, wall_after)
        } else {
            (wall_after, wall_before)
        };
        let span = (last - first).num_minutes();
        let changed = if span > 1 {
            (0..4)
                .map(|_| {
                    let wall = first + chrono::Duration::minutes(rng.between(0, span));
                    (i64::from(wall.hour()), i64::from(wall.minute()))
                })
                .collect()
        } else {
            Vec::new()
        };
        Target {
            year: local_after.year(),
            month: local_after.month(),
            day: local_after.day(),
            hours,
            minutes,
            changed,
        }
    }
}

/// How the generator writes one field: its range, names, favourite values.
struct FieldShape<'a> {
    low: i64,
    high: i64,
    names: &'a [&'a str],
    favourites: Vec<i64>,
    steps: &'a [i64],
    /// Percent of plain `*`.
    star: u64,
    /// Day-of-week: `x-0` (= `x-7`, up to Sunday) is worth writing.
    sunday_end: bool,
}

const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];
const WEEKDAYS: [&str; 7] = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"];

/// A name in a random letter case (cronie compares names ignoring case).
fn cased(rng: &mut SplitMix64, name: &str) -> String {
    match rng.below(4) {
        0 => name.to_ascii_uppercase(),
        1 => name.to_ascii_lowercase(),
        _ => name.to_owned(),
    }
}

impl FieldShape<'_> {
    fn value(&self, rng: &mut SplitMix64) -> i64 {
        if rng.percent(60) {
            (*rng.pick(&self.favourites)).clamp(self.low, self.high)
        } else {
            rng.between(self.low, self.high)
        }
    }

    /// A value as written: sometimes a name, sometimes with a leading zero.
    fn written(&self, rng: &mut SplitMix64, value: i64) -> String {
        if !self.names.is_empty() && rng.percent(30) {
            let index = (value - self.low) as usize % self.names.len();
            return cased(rng, self.names[index]);
        }
        if value < 10 && rng.percent(10) {
            return format!("0{value}");
        }
        value.to_string()
    }

    /// `a-b` with a < b.
    fn range(&self, rng: &mut SplitMix64) -> String {
        let first = self.value(rng).min(self.high - 1);
        let length = rng.between(1, 12);
        let last = rng.between(first + 1, self.high.min(first + length));
        format!("{}-{}", self.written(rng, first), self.written(rng, last))
    }

    fn item(&self, rng: &mut SplitMix64) -> String {
        if self.sunday_end && rng.percent(15) {
            let first = rng.between(1, 6);
            let sunday = if rng.percent(50) {
                "0".to_owned()
            } else {
                cased(rng, "Sun")
            };
            return format!("{}-{sunday}", self.written(rng, first));
        }
        match rng.below(100) {
            0..=44 => {
                let value = self.value(rng);
                self.written(rng, value)
            }
            45..=64 => self.range(rng),
            65..=79 => format!("*/{}", rng.pick(self.steps)),
            _ => format!("{}/{}", self.range(rng), rng.pick(self.steps)),
        }
    }

    /// A whole field: `*`, one item, or a list (which may start with `*/n`).
    fn field(&self, rng: &mut SplitMix64) -> String {
        if rng.percent(self.star) {
            return "*".to_owned();
        }
        let count = match rng.below(10) {
            0..=5 => 1,
            6..=8 => 2,
            _ => 3,
        };
        (0..count)
            .map(|_| self.item(rng))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// A field that does not start with `*` (restricts its day field).
    fn restricted_field(&self, rng: &mut SplitMix64) -> String {
        loop {
            let field = self.field(rng);
            if !field.starts_with('*') {
                return field;
            }
        }
    }
}

fn minute_shape(target: &Target) -> FieldShape<'static> {
    FieldShape {
        low: 0,
        high: 59,
        names: &[],
        favourites: target.minutes.clone(),
        steps: &[1, 2, 5, 7, 10, 15, 20, 30, 45, 59, 60, 90],
        star: 10,
        sunday_end: false,
    }
}

fn hour_shape(target: &Target) -> FieldShape<'static> {
    FieldShape {
        low: 0,
        high: 23,
        names: &[],
        favourites: target.hours.clone(),
        steps: &[1, 2, 3, 4, 5, 6, 7, 12, 23, 24],
        star: 15,
        sunday_end: false,
    }
}

fn day_of_month_shape(target: &Target) -> FieldShape<'static> {
    let day = i64::from(target.day);
    FieldShape {
        low: 1,
        high: 31,
        names: &[],
        favourites: vec![day, day - 1, day + 1, 1, 15, 28, 29, 30, 31],
        steps: &[2, 3, 5, 7, 10, 15, 31],
        star: 0,
        sunday_end: false,
    }
}

fn month_shape(target: &Target) -> FieldShape<'static> {
    let month = i64::from(target.month);
    FieldShape {
        low: 1,
        high: 12,
        names: &MONTHS,
        favourites: vec![month, month - 1, month + 1, 2, 12],
        steps: &[2, 3, 4, 6, 12],
        star: 70,
        sunday_end: false,
    }
}

fn day_of_week_shape(target: &Target) -> FieldShape<'static> {
    let weekday = i64::from(
        Utc.with_ymd_and_hms(target.year, target.month, target.day, 12, 0, 0)
            .single()
            .map_or(0, |noon| noon.weekday().num_days_from_sunday()),
    );
    FieldShape {
        low: 0,
        high: 7,
        names: &WEEKDAYS,
        favourites: vec![weekday, (weekday + 1) % 7, (weekday + 6) % 7, 0, 7, 5, 6],
        steps: &[2, 3, 7],
        star: 0,
        sunday_end: true,
    }
}

/// A random expression whose meaning cronie and cronlease agree on (no
/// deviation, no extension), that matches some date, aimed at `target`.
fn random_schedule_expression(rng: &mut SplitMix64, target: &Target) -> (String, RefSchedule) {
    loop {
        let expression = schedule_expression_candidate(rng, target);
        let (Ok(cronie), Ok(cronlease)) = (parse(&expression), parse_as_cronlease(&expression))
        else {
            continue;
        };
        if cronlease.differs_from_cronie.is_none() && cronie == cronlease {
            return (expression, cronlease);
        }
    }
}

fn schedule_expression_candidate(rng: &mut SplitMix64, target: &Target) -> String {
    if rng.percent(3) {
        return rng
            .pick(&[
                "@yearly",
                "@annually",
                "@monthly",
                "@weekly",
                "@daily",
                "@midnight",
                "@hourly",
            ])
            .to_string();
    }
    let (minute, hour) = if !target.changed.is_empty() && rng.percent(35) {
        changed_time_fields(rng, target)
    } else {
        (
            minute_shape(target).field(rng),
            hour_shape(target).field(rng),
        )
    };
    let day_of_month_shape = day_of_month_shape(target);
    let day_of_week_shape = day_of_week_shape(target);
    let month_shape = month_shape(target);
    let star_step = |rng: &mut SplitMix64, steps: &[i64]| format!("*/{}", rng.pick(steps));
    let (day_of_month, day_of_week) = match rng.below(100) {
        // Neither day field restricts.
        0..=39 => ("*".to_owned(), "*".to_owned()),
        // One restricts.
        40..=54 => (day_of_month_shape.restricted_field(rng), "*".to_owned()),
        55..=69 => ("*".to_owned(), day_of_week_shape.restricted_field(rng)),
        // Both restrict and neither starts with `*`: either matches.
        70..=79 => (
            day_of_month_shape.restricted_field(rng),
            day_of_week_shape.restricted_field(rng),
        ),
        // One starts with `*` (a step) and the other restricts: both must.
        80..=87 => (
            star_step(rng, day_of_month_shape.steps),
            day_of_week_shape.restricted_field(rng),
        ),
        88..=94 => (
            day_of_month_shape.restricted_field(rng),
            star_step(rng, day_of_week_shape.steps),
        ),
        // A sparse date: the target's own day.
        _ => (
            target.day.to_string(),
            if rng.percent(50) {
                "*".to_owned()
            } else {
                day_of_week_shape.restricted_field(rng)
            },
        ),
    };
    let month = if day_of_month == target.day.to_string() && rng.percent(70) {
        month_shape.written(rng, i64::from(target.month))
    } else {
        month_shape.field(rng)
    };
    let five = format!("{minute} {hour} {day_of_month} {month} {day_of_week}");
    if rng.percent(90) {
        return five;
    }
    // cronlease's 7-field form. Every year field includes future years, so
    // that a year in the past cannot make cronlease call the expression
    // one that never fires.
    let year = target.year;
    let years = match rng.below(5) {
        0 => "*".to_owned(),
        1 => format!("{year}-9999"),
        2 => format!("{year},{}-9999", year + 1),
        3 => format!("1970-{},{}-9999", year - 1, year + 1),
        _ => format!("{}-{year},2090-9999", year - 1),
    };
    format!("0 {five} {years}")
}

/// Minute and hour fields of a fixed-time job whose time the change at
/// the target skips or repeats: alone, in a list, or in a range.
fn changed_time_fields(rng: &mut SplitMix64, target: &Target) -> (String, String) {
    let (hour, minute) = *rng.pick(&target.changed);
    let around = |rng: &mut SplitMix64, value: i64, high: i64| match rng.below(4) {
        0 => format!("{value},{}", rng.between(0, high)),
        1 => format!(
            "{}-{}",
            (value - rng.between(0, 3)).max(0),
            (value + rng.between(1, 3)).min(high)
        ),
        _ => value.to_string(),
    };
    let minute = around(rng, minute, 59);
    let hour = around(rng, hour, 23);
    (minute, hour)
}

fn random_policy(rng: &mut SplitMix64, schedule: &RefSchedule) -> (DstPolicy, bool) {
    if !schedule.is_fixed_time() {
        return (DstPolicy::default(), false);
    }
    let gap = if rng.percent(30) {
        DstGap::Skip
    } else {
        DstGap::RunAfter
    };
    let repeat = if rng.percent(30) {
        DstRepeat::Both
    } else {
        DstRepeat::First
    };
    (DstPolicy { gap, repeat }, rng.percent(15))
}

// ---------------------------------------------------------------------------
// Disagreements.

/// One place where cronlease and the model differ, with what replays it.
struct Disagreement {
    what: String,
    expression: String,
    zone: Tz,
    policy: DstPolicy,
    /// The compared window; `None` for the acceptance comparison.
    from: Option<DateTime<Utc>>,
    until: Option<DateTime<Utc>>,
    model: Vec<DateTime<Utc>>,
    cronlease: Vec<DateTime<Utc>>,
}

impl std::fmt::Display for Disagreement {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(formatter, "{}: {:?}", self.what, self.expression)?;
        if let Some(from) = self.from {
            write!(
                formatter,
                " in {} (dst_gap = {}, dst_repeat = {}) from {}",
                self.zone.name(),
                gap_name(self.policy.gap),
                repeat_name(self.policy.repeat),
                rfc3339(from),
            )?;
        }
        if let Some(until) = self.until {
            write!(formatter, " until {}", rfc3339(until))?;
        }
        writeln!(formatter)?;
        if self.model.is_empty() && self.cronlease.is_empty() {
            return Ok(());
        }
        // Long lists: show from a little before the first difference.
        let first_difference = self
            .model
            .iter()
            .zip(&self.cronlease)
            .position(|(model, cronlease)| model != cronlease)
            .unwrap_or(self.model.len().min(self.cronlease.len()));
        let shown_from = first_difference.saturating_sub(3);
        let show = |instants: &[DateTime<Utc>]| {
            let shown: Vec<String> = instants
                .iter()
                .skip(shown_from)
                .take(10)
                .map(|instant| rfc3339(*instant))
                .collect();
            let more = instants.len().saturating_sub(shown_from + 10);
            format!(
                "{}[{}{}] ({} in all)",
                if shown_from > 0 {
                    format!("[{shown_from} equal first] ")
                } else {
                    String::new()
                },
                shown.join(", "),
                if more > 0 {
                    format!(", … {more} more")
                } else {
                    String::new()
                },
                instants.len()
            )
        };
        writeln!(formatter, "    model:     {}", show(&self.model))?;
        write!(formatter, "    cronlease: {}", show(&self.cronlease))
    }
}

#[track_caller]
fn fail_on_disagreements(test: &str, seed: u64, disagreements: &[Disagreement], checked: usize) {
    if disagreements.is_empty() {
        return;
    }
    let mut report = format!(
        "{test}: {} of {checked} comparisons disagree (seed {seed}, replay with \
         CRONLEASE_CRON_SEED={seed}); the first {}:\n",
        disagreements.len(),
        disagreements.len().min(SHOWN_DISAGREEMENTS)
    );
    for disagreement in disagreements.iter().take(SHOWN_DISAGREEMENTS) {
        let _ = writeln!(report, "{disagreement}");
    }
    panic!("{report}");
}

// ---------------------------------------------------------------------------
// The schedule comparison.

/// The model's fire times for a job over its window: 3 days, or 40 for an
/// expression that fires less than 3 times in 3 days.
fn model_window(
    job: &Job,
    schedule: &RefSchedule,
    from: DateTime<Utc>,
) -> (DateTime<Utc>, Vec<DateTime<Utc>>) {
    let until = from + WINDOW;
    let fired = fires(schedule, job.zone, job.policy, from, until);
    if fired.len() >= SPARSE_FIRES {
        return (until, fired);
    }
    let until = from + SPARSE_WINDOW;
    (until, fires(schedule, job.zone, job.policy, from, until))
}

#[test]
fn schedules_agree_with_the_cronie_model() {
    let seed = seed("schedules_agree_with_the_cronie_model");
    let mut rng = SplitMix64::new(seed);
    let starts = start_instants(&mut rng);
    let zones: Vec<Tz> = ZONES.iter().map(|name| zone(name)).collect();
    let mut disagreements = Vec::new();
    let mut model_time = Duration::ZERO;
    let mut cronlease_time = Duration::ZERO;
    let mut windows = 0;
    for start in &starts {
        let mut jobs = Vec::new();
        let mut schedules = Vec::new();
        for index in 0..JOBS_PER_START {
            let zone = if rng.percent(75) {
                start.zone
            } else {
                *rng.pick(&zones)
            };
            let target = Target::new(&mut rng, zone, start.transition.unwrap_or(start.from));
            let (expression, schedule) = random_schedule_expression(&mut rng, &target);
            let (policy, spell_out_policy) = random_policy(&mut rng, &schedule);
            jobs.push(Job {
                name: format!("j{:04}", index + 1),
                expression,
                zone,
                policy,
                spell_out_policy,
            });
            schedules.push(schedule);
        }

        let started = Instant::now();
        let expected: Vec<(DateTime<Utc>, Vec<DateTime<Utc>>)> = jobs
            .iter()
            .zip(&schedules)
            .map(|(job, schedule)| model_window(job, schedule, start.from))
            .collect();
        model_time += started.elapsed();
        windows += jobs.len();

        let started = Instant::now();
        let (checked, refused) = check_accepting_the_rest(&jobs, start.from, &mut disagreements);
        cronlease_time += started.elapsed();

        for ((job, schedule), (until, model)) in jobs.iter().zip(&schedules).zip(expected) {
            let compared = Compared {
                job,
                schedule,
                from: start.from,
                until,
                model,
            };
            match checked.get(&job.name) {
                Some(checked) => disagreements.extend(compared.against(checked)),
                None if refused.contains(&job.name) => {}
                None => disagreements.push(
                    compared.disagreement(format!("{} is missing from check's output", job.name)),
                ),
            }
        }
    }
    println!(
        "{windows} expression windows from {} start instants: the model took {model_time:?} \
         ({:?} per 1000), cronlease check {cronlease_time:?}",
        starts.len(),
        model_time * 1000 / windows.max(1) as u32,
    );
    fail_on_disagreements(
        "schedules_agree_with_the_cronie_model",
        seed,
        &disagreements,
        windows,
    );
}

/// One job's window: what the model says, to compare with `check`.
struct Compared<'a> {
    job: &'a Job,
    schedule: &'a RefSchedule,
    from: DateTime<Utc>,
    until: DateTime<Utc>,
    model: Vec<DateTime<Utc>>,
}

impl Compared<'_> {
    fn disagreement(&self, what: String) -> Disagreement {
        Disagreement {
            what,
            expression: self.job.expression.clone(),
            zone: self.job.zone,
            policy: self.job.policy,
            from: Some(self.from),
            until: Some(self.until),
            model: Vec::new(),
            cronlease: Vec::new(),
        }
    }

    /// The job's timing, DST options and fire times in the window as
    /// `check` shows them, against the model's.
    fn against(self, checked: &CheckedJob) -> Option<Disagreement> {
        let mut problems = Vec::new();
        let timing = if self.schedule.is_fixed_time() {
            "fixed_time"
        } else {
            "wall_clock"
        };
        if checked.timing.as_deref() != Some(timing) {
            problems.push(format!(
                "timing {:?}, the model says {timing:?}",
                checked.timing
            ));
        }
        let policy_shown = (checked.dst_gap.as_deref(), checked.dst_repeat.as_deref());
        let policy_set = (
            Some(gap_name(self.job.policy.gap)),
            Some(repeat_name(self.job.policy.repeat)),
        );
        if policy_shown != policy_set {
            problems.push(format!("DST options shown as {policy_shown:?}"));
        }
        // A full list may end before the window: compare up to its end.
        let compared_until = match checked.next.last() {
            Some(&last) if checked.next.len() >= NEXT_COUNT => last.min(self.until),
            _ => self.until,
        };
        let in_window = |instant: &DateTime<Utc>| *instant <= compared_until;
        let theirs: Vec<_> = checked.next.iter().copied().filter(in_window).collect();
        let ours: Vec<_> = self.model.iter().copied().filter(in_window).collect();
        let fire_times_differ = theirs != ours;
        if fire_times_differ {
            problems.push("fire times differ".to_owned());
        }
        if problems.is_empty() {
            return None;
        }
        let mut disagreement =
            self.disagreement(format!("{}: {}", self.job.name, problems.join("; ")));
        if fire_times_differ {
            disagreement.model = ours;
            disagreement.cronlease = theirs;
        }
        Some(disagreement)
    }
}

/// Runs `check` on `jobs` from `from` and returns what it says about each
/// job it accepts, and the names of those it refuses. A refusal is a
/// disagreement (the model accepts every generated expression); `check`
/// runs again without the refused jobs, so that one refusal does not hide
/// the other jobs' times.
fn check_accepting_the_rest(
    jobs: &[Job],
    from: DateTime<Utc>,
    disagreements: &mut Vec<Disagreement>,
) -> (BTreeMap<String, CheckedJob>, BTreeSet<String>) {
    let mut remaining: Vec<&Job> = jobs.iter().collect();
    let mut all_refused = BTreeSet::new();
    loop {
        let file = ConfigFile::new(&config_text(remaining.iter().copied()));
        let run = check_config(&file, from, NEXT_COUNT);
        match run.code() {
            Some(0) => return (checked_jobs(&run), all_refused),
            Some(2) => {
                let refused = refused_jobs(&run.stderr());
                assert!(
                    !refused.is_empty(),
                    "check refused the config without naming a job\n{}",
                    run.describe()
                );
                for (name, line) in &refused {
                    let Some(job) = remaining.iter().find(|job| &job.name == name) else {
                        panic!("check names an unknown job {name:?}\n{}", run.describe());
                    };
                    disagreements.push(Disagreement {
                        what: format!("cronlease refuses what the model accepts: {line}"),
                        expression: job.expression.clone(),
                        zone: job.zone,
                        policy: job.policy,
                        from: Some(from),
                        until: None,
                        model: Vec::new(),
                        cronlease: Vec::new(),
                    });
                }
                remaining.retain(|job| !refused.contains_key(&job.name));
                all_refused.extend(refused.into_keys());
                if remaining.is_empty() {
                    return (BTreeMap::new(), all_refused);
                }
            }
            _ => panic!("check failed\n{}", run.describe()),
        }
    }
}

// ---------------------------------------------------------------------------
// The acceptance comparison.

/// Numbers outside each field, and words that are not its names.
fn out_of_range_values(low: i64, high: i64) -> Vec<String> {
    let mut values: Vec<String> = [high + 1, high + 10, 60, 24, 32, 13, 8, 100, 1000, 99_999]
        .iter()
        .map(i64::to_string)
        .collect();
    if low > 0 {
        values.push((low - 1).to_string());
    }
    values
}

const MALFORMED_ITEMS: [&str; 20] = [
    "", "*5", "5-", "-5", "1-2-3", "*/", "*-5", "5--6", "**", "5-*", "*/*", "0x5", "5a", "a5",
    "1/", "/5", "1-5/2/3", "*/2-4", "*/0", "1-3/0",
];

const WRONG_NAMES: [&str; 9] = [
    "Sunday", "January", "Jun", "Mon", "Dec", "Thu", "mOn", "Ja", "Monday",
];

/// One list item for the acceptance test, valid or not.
fn acceptance_item(rng: &mut SplitMix64, low: i64, high: i64, names: &[&str]) -> String {
    let value = |rng: &mut SplitMix64| rng.between(low, high);
    match rng.below(100) {
        0..=19 => value(rng).to_string(),
        20..=24 => rng.pick(&out_of_range_values(low, high)).clone(),
        25..=27 => format!("0{}", value(rng)),
        28..=33 if !names.is_empty() => {
            let name = *rng.pick(names);
            cased(rng, name)
        }
        28..=35 => rng.pick(&WRONG_NAMES).to_string(),
        36..=41 => "*".to_owned(),
        42..=49 => format!("*/{}", rng.pick(&[1, 2, 7, 15, 30, 59, 60, 61, 100])),
        50..=57 => {
            let first = value(rng);
            format!("{first}-{}", rng.between(first, high))
        }
        58..=62 => {
            let first = value(rng);
            format!(
                "{first}-{}/{}",
                rng.between(first, high),
                rng.pick(&[1, 2, 3, 5, 10, 30])
            )
        }
        // Reversed ranges, and `x-0` in every field.
        63..=67 => {
            let last = value(rng);
            format!("{}-{last}", rng.between(last, high))
        }
        68..=72 => format!("{}-0", rng.between(low.max(1), high)),
        // A bound outside the field, reached by the step or not.
        73..=77 => {
            let first = value(rng);
            let step = *rng.pick(&[1, 10, 50, 100]);
            format!("{first}-{}/{step}", high + rng.between(1, 20))
        }
        78..=80 => rng
            .pick(&[
                "~".to_owned(),
                format!("{}~{}", low, high),
                format!("~{high}"),
            ])
            .clone(),
        _ => rng.pick(&MALFORMED_ITEMS).to_string(),
    }
}

fn acceptance_field(rng: &mut SplitMix64, low: i64, high: i64, names: &[&str]) -> String {
    let count = match rng.below(10) {
        0..=6 => 1,
        7..=8 => 2,
        _ => 3,
    };
    let mut field = (0..count)
        .map(|_| acceptance_item(rng, low, high, names))
        .collect::<Vec<_>>()
        .join(",");
    match rng.below(40) {
        0 => field.push(','),
        1 => field.insert(0, ','),
        2 => field = field.replacen(',', ",,", 1),
        _ => {}
    }
    if field.is_empty() {
        // A whitespace-separated field cannot be empty.
        field.push('*');
    }
    field
}

fn acceptance_five_fields(rng: &mut SplitMix64) -> Vec<String> {
    let mut fields = vec![
        acceptance_field(rng, 0, 59, &[]),
        acceptance_field(rng, 0, 23, &[]),
        acceptance_field(rng, 1, 31, &[]),
        acceptance_field(rng, 1, 12, &MONTHS),
        acceptance_field(rng, 0, 7, &WEEKDAYS),
    ];
    // Plain fields now and then, so a single bad field decides.
    for field in fields.iter_mut() {
        if rng.percent(35) {
            *field = "*".to_owned();
        }
    }
    // Dates that may never come.
    if rng.percent(6) {
        fields[2] = rng
            .pick(&["30", "31", "29-31", "30,31", "*/30"])
            .to_string();
        fields[3] = rng
            .pick(&["2", "Feb", "4,6", "Apr", "9,11", "2,4"])
            .to_string();
        fields[4] = rng.pick(&["*", "*/2", "1", "Mon"]).to_string();
    }
    fields
}

fn acceptance_expression(rng: &mut SplitMix64) -> String {
    match rng.below(100) {
        0..=5 => rng
            .pick(&[
                "@yearly",
                "@annually",
                "@monthly",
                "@weekly",
                "@daily",
                "@midnight",
                "@hourly",
                "@reboot",
                "@DAILY",
                "@Hourly",
                "@WEEKLY",
                "@Reboot",
                "@fortnightly",
                "@",
                "@daily 5",
            ])
            .to_string(),
        6..=10 => {
            let mut fields = acceptance_five_fields(rng);
            match rng.below(3) {
                0 => {
                    fields.pop();
                }
                1 => fields.insert(0, rng.pick(&["0", "*/5", "30"]).to_string()),
                _ => {
                    fields.push("*".to_owned());
                    fields.push("*".to_owned());
                    fields.push("*".to_owned());
                }
            }
            fields.join(" ")
        }
        11..=18 => {
            let five = acceptance_five_fields(rng).join(" ");
            let year = rng
                .pick(&[
                    "*",
                    "2030",
                    "2030-2040",
                    "2031,2035",
                    "2030,2032-2099",
                    "1969",
                    "10000",
                    "2040-2030",
                    "2030-",
                    "20x0",
                ])
                .to_string();
            format!("0 {five} {year}")
        }
        _ => acceptance_five_fields(rng).join(" "),
    }
}

/// Extensions cronlease accepts and cronie refuses (deviation e): each must
/// be accepted.
const EXTENSIONS: [&str; 12] = [
    "5/15 * * * *",
    "0 0 ? * 1",
    "0 0 L * *",
    "0 0 LW * *",
    "0 0 15W * *",
    "0 0 * * 5L",
    "0 0 * * 5#3",
    "H * * * *",
    "H(0-29) 3 * * *",
    "H/15 * * * *",
    "*/5 * * * * *",
    "*/10 0 0 * * * 2030",
];

#[test]
fn acceptance_agrees_with_the_cronie_parser() {
    let seed = seed("acceptance_agrees_with_the_cronie_parser");
    let mut rng = SplitMix64::new(seed);
    let mut expressions: Vec<String> = (0..ACCEPTANCE_EXPRESSIONS)
        .map(|_| acceptance_expression(&mut rng))
        .collect();
    expressions.extend(EXTENSIONS.iter().map(|text| text.to_string()));
    let utc = zone("UTC");
    let jobs: Vec<Job> = expressions
        .iter()
        .enumerate()
        .map(|(index, expression)| Job {
            name: format!("j{:04}", index + 1),
            expression: expression.clone(),
            zone: utc,
            policy: DstPolicy::default(),
            spell_out_policy: false,
        })
        .collect();
    let file = ConfigFile::new(&config_text(&jobs));
    let from = Utc
        .with_ymd_and_hms(2026, 1, 1, 0, 0, 0)
        .single()
        .expect("exists");
    let run = check_config(&file, from, 1);
    let refused = match run.code() {
        Some(0) => BTreeMap::new(),
        Some(2) => refused_jobs(&run.stderr()),
        _ => panic!("check failed\n{}", run.describe()),
    };

    let mut disagreements = Vec::new();
    let mut explained: BTreeMap<char, usize> = BTreeMap::new();
    let mut examples: BTreeMap<char, BTreeSet<String>> = BTreeMap::new();
    for job in &jobs {
        let cronlease_accepts = !refused.contains_key(&job.name);
        let cronie_accepts = parse(&job.expression).is_ok();
        let model = parse_as_cronlease(&job.expression);
        let extension = cronlease_extension(&job.expression);
        let deviation = match &model {
            Ok(schedule) => schedule.differs_from_cronie,
            Err(refusal) => refusal.deviation,
        };
        let mut note = |deviation: Deviation| {
            *explained.entry(deviation.letter()).or_default() += 1;
            let shown = examples.entry(deviation.letter()).or_default();
            if shown.len() < 3 {
                shown.insert(job.expression.clone());
            }
        };
        let unexplained = if cronlease_accepts == model.is_ok() {
            if cronlease_accepts != cronie_accepts {
                note(deviation.expect("the model names why it differs from cronie"));
            }
            false
        } else if cronlease_accepts && extension.is_some() {
            note(Deviation::Extension);
            false
        } else {
            true
        };
        let is_listed_extension = EXTENSIONS.contains(&job.expression.as_str());
        if unexplained || (is_listed_extension && !cronlease_accepts) {
            let model_says = match &model {
                Ok(_) => "accepts".to_owned(),
                Err(refusal) => format!("refuses ({})", refusal.message),
            };
            let cronlease_says = refused
                .get(&job.name)
                .map_or("accepts".to_owned(), |line| format!("refuses: {line}"));
            disagreements.push(Disagreement {
                what: format!(
                    "{}: the model of cronlease {model_says}, cronie {}, cronlease {cronlease_says}",
                    job.name,
                    if cronie_accepts { "accepts" } else { "refuses" },
                ),
                expression: job.expression.clone(),
                zone: utc,
                policy: DstPolicy::default(),
                from: None,
                until: None,
                model: Vec::new(),
                cronlease: Vec::new(),
            });
        }
    }
    let accepted = jobs.len() - refused.len();
    println!(
        "{} expressions, {accepted} accepted by cronlease; differences from cronie by deviation:",
        jobs.len()
    );
    for deviation in DEVIATIONS {
        if let Some(count) = explained.get(&deviation.letter()) {
            println!(
                "  {}. {count} ({}), e.g. {:?}",
                deviation.letter(),
                deviation.summary(),
                examples[&deviation.letter()]
            );
        }
    }
    fail_on_disagreements(
        "acceptance_agrees_with_the_cronie_parser",
        seed,
        &disagreements,
        jobs.len(),
    );
}

// ---------------------------------------------------------------------------
// Hand-picked vectors.

/// A schedule, where, from when, and its next fire times worked out by hand
/// from cron.c's loop.
struct Vector {
    expression: &'static str,
    zone: &'static str,
    policy: DstPolicy,
    from: &'static str,
    expected: &'static [&'static str],
}

const CRONIE: DstPolicy = DstPolicy {
    gap: DstGap::RunAfter,
    repeat: DstRepeat::First,
};
const SKIP_GAP: DstPolicy = DstPolicy {
    gap: DstGap::Skip,
    repeat: DstRepeat::First,
};
const BOTH_REPEATS: DstPolicy = DstPolicy {
    gap: DstGap::RunAfter,
    repeat: DstRepeat::Both,
};

const NEW_YORK: &str = "America/New_York";

/// New York 2026: 03-08 02:00 EST becomes 03:00 EDT (07:00Z); 11-01 02:00
/// EDT becomes 01:00 EST (06:00Z). Lord Howe: 2026-10-04 02:00 (+10:30)
/// becomes 02:30 (+11) at 2026-10-03T15:30Z; 2027-04-04 02:00 (+11) becomes
/// 01:30 (+10:30) at 2027-04-03T15:00Z. Chatham: 2026-09-27 02:45 (+12:45)
/// becomes 03:45 (+13:45) at 2026-09-26T14:00Z; 2027-04-04 03:45 (+13:45)
/// becomes 02:45 (+12:45) at 2027-04-03T14:00Z. Sao Paulo: 2018-11-04
/// 00:00 (-03) becomes 01:00 (-02) at 03:00Z.
const VECTORS: &[Vector] = &[
    // A fixed time in the repeated hour runs the first time only.
    Vector {
        expression: "30 1,13 * * *",
        zone: NEW_YORK,
        policy: CRONIE,
        from: "2026-11-01T00:00:00Z",
        expected: &[
            "2026-11-01T05:30:00Z",
            "2026-11-01T18:30:00Z",
            "2026-11-02T06:30:00Z",
        ],
    },
    Vector {
        expression: "30 1,13 * * *",
        zone: NEW_YORK,
        policy: BOTH_REPEATS,
        from: "2026-11-01T00:00:00Z",
        expected: &[
            "2026-11-01T05:30:00Z",
            "2026-11-01T06:30:00Z",
            "2026-11-01T18:30:00Z",
        ],
    },
    // A fixed time in the gap runs when the clock has jumped.
    Vector {
        expression: "30 1-2 * * *",
        zone: NEW_YORK,
        policy: CRONIE,
        from: "2026-03-08T00:00:00Z",
        expected: &[
            "2026-03-08T06:30:00Z",
            "2026-03-08T07:00:00Z",
            "2026-03-09T05:30:00Z",
            "2026-03-09T06:30:00Z",
        ],
    },
    Vector {
        expression: "30 1-2 * * *",
        zone: NEW_YORK,
        policy: SKIP_GAP,
        from: "2026-03-08T00:00:00Z",
        expected: &[
            "2026-03-08T06:30:00Z",
            "2026-03-09T05:30:00Z",
            "2026-03-09T06:30:00Z",
        ],
    },
    // Two fixed times in one gap: one start (deviation i).
    Vector {
        expression: "0,30 2 * * *",
        zone: NEW_YORK,
        policy: CRONIE,
        from: "2026-03-08T00:00:00Z",
        expected: &[
            "2026-03-08T07:00:00Z",
            "2026-03-09T06:00:00Z",
            "2026-03-09T06:30:00Z",
        ],
    },
    // Under `skip`, the time the clock jumps to still runs.
    Vector {
        expression: "0 3 * * *",
        zone: NEW_YORK,
        policy: SKIP_GAP,
        from: "2026-03-08T00:00:00Z",
        expected: &["2026-03-08T07:00:00Z", "2026-03-09T07:00:00Z"],
    },
    // Wildcard jobs run by the wall clock: twice in the repeated hour…
    Vector {
        expression: "*/30 * * * *",
        zone: NEW_YORK,
        policy: CRONIE,
        from: "2026-11-01T04:45:00Z",
        expected: &[
            "2026-11-01T05:00:00Z",
            "2026-11-01T05:30:00Z",
            "2026-11-01T06:00:00Z",
            "2026-11-01T06:30:00Z",
            "2026-11-01T07:00:00Z",
        ],
    },
    Vector {
        expression: "30 * * * *",
        zone: NEW_YORK,
        policy: CRONIE,
        from: "2026-11-01T04:45:00Z",
        expected: &[
            "2026-11-01T05:30:00Z",
            "2026-11-01T06:30:00Z",
            "2026-11-01T07:30:00Z",
        ],
    },
    // …and not at all in the gap.
    Vector {
        expression: "30 * * * *",
        zone: NEW_YORK,
        policy: CRONIE,
        from: "2026-03-08T06:00:00Z",
        expected: &["2026-03-08T06:30:00Z", "2026-03-08T07:30:00Z"],
    },
    Vector {
        expression: "@hourly",
        zone: NEW_YORK,
        policy: CRONIE,
        from: "2026-11-01T04:30:00Z",
        expected: &[
            "2026-11-01T05:00:00Z",
            "2026-11-01T06:00:00Z",
            "2026-11-01T07:00:00Z",
        ],
    },
    // Every second hour, a fixed-time job, across both changes.
    Vector {
        expression: "0 0-23/2 * * *",
        zone: NEW_YORK,
        policy: CRONIE,
        from: "2026-11-01T03:30:00Z",
        expected: &[
            "2026-11-01T04:00:00Z",
            "2026-11-01T07:00:00Z",
            "2026-11-01T09:00:00Z",
        ],
    },
    Vector {
        expression: "0 0-23/2 * * *",
        zone: NEW_YORK,
        policy: CRONIE,
        from: "2026-03-08T04:30:00Z",
        expected: &[
            "2026-03-08T05:00:00Z",
            "2026-03-08T07:00:00Z",
            "2026-03-08T08:00:00Z",
        ],
    },
    Vector {
        expression: "21-22 1 * * *",
        zone: NEW_YORK,
        policy: CRONIE,
        from: "2026-11-01T04:00:00Z",
        expected: &[
            "2026-11-01T05:21:00Z",
            "2026-11-01T05:22:00Z",
            "2026-11-02T06:21:00Z",
            "2026-11-02T06:22:00Z",
        ],
    },
    Vector {
        expression: "21-22 1 * * *",
        zone: NEW_YORK,
        policy: BOTH_REPEATS,
        from: "2026-11-01T04:00:00Z",
        expected: &[
            "2026-11-01T05:21:00Z",
            "2026-11-01T05:22:00Z",
            "2026-11-01T06:21:00Z",
            "2026-11-01T06:22:00Z",
        ],
    },
    // Lord Howe's half-hour shift.
    Vector {
        expression: "15 2 * * *",
        zone: "Australia/Lord_Howe",
        policy: CRONIE,
        from: "2026-10-03T12:00:00Z",
        expected: &["2026-10-03T15:30:00Z", "2026-10-04T15:15:00Z"],
    },
    Vector {
        expression: "15 2 * * *",
        zone: "Australia/Lord_Howe",
        policy: SKIP_GAP,
        from: "2026-10-03T12:00:00Z",
        expected: &["2026-10-04T15:15:00Z"],
    },
    Vector {
        expression: "15 1 * * *",
        zone: "Australia/Lord_Howe",
        policy: CRONIE,
        from: "2026-10-03T12:00:00Z",
        expected: &["2026-10-03T14:45:00Z", "2026-10-04T14:15:00Z"],
    },
    Vector {
        expression: "15 1 * * *",
        zone: "Australia/Lord_Howe",
        policy: CRONIE,
        from: "2027-04-03T12:00:00Z",
        expected: &["2027-04-03T14:15:00Z", "2027-04-04T14:45:00Z"],
    },
    Vector {
        expression: "15 2 * * *",
        zone: "Australia/Lord_Howe",
        policy: CRONIE,
        from: "2027-04-03T12:00:00Z",
        expected: &["2027-04-03T15:45:00Z", "2027-04-04T15:45:00Z"],
    },
    Vector {
        expression: "45 1 * * *",
        zone: "Australia/Lord_Howe",
        policy: CRONIE,
        from: "2027-04-03T12:00:00Z",
        expected: &["2027-04-03T14:45:00Z", "2027-04-04T15:15:00Z"],
    },
    Vector {
        expression: "45 1 * * *",
        zone: "Australia/Lord_Howe",
        policy: BOTH_REPEATS,
        from: "2027-04-03T12:00:00Z",
        expected: &[
            "2027-04-03T14:45:00Z",
            "2027-04-03T15:15:00Z",
            "2027-04-04T15:15:00Z",
        ],
    },
    Vector {
        expression: "*/15 1 * * *",
        zone: "Australia/Lord_Howe",
        policy: CRONIE,
        from: "2027-04-03T13:30:00Z",
        expected: &[
            "2027-04-03T14:00:00Z",
            "2027-04-03T14:15:00Z",
            "2027-04-03T14:30:00Z",
            "2027-04-03T14:45:00Z",
            "2027-04-03T15:00:00Z",
            "2027-04-03T15:15:00Z",
        ],
    },
    // Chatham: +12:45 and +13:45, changing at 02:45 local standard time.
    Vector {
        expression: "0 3 * * *",
        zone: "Pacific/Chatham",
        policy: CRONIE,
        from: "2026-09-26T12:00:00Z",
        expected: &["2026-09-26T14:00:00Z", "2026-09-27T13:15:00Z"],
    },
    Vector {
        expression: "50 2 * * *",
        zone: "Pacific/Chatham",
        policy: SKIP_GAP,
        from: "2026-09-26T12:00:00Z",
        expected: &["2026-09-27T13:05:00Z"],
    },
    Vector {
        expression: "0 3 * * *",
        zone: "Pacific/Chatham",
        policy: CRONIE,
        from: "2027-04-03T12:00:00Z",
        expected: &["2027-04-03T13:15:00Z", "2027-04-04T14:15:00Z"],
    },
    Vector {
        expression: "*/30 3 * * *",
        zone: "Pacific/Chatham",
        policy: CRONIE,
        from: "2027-04-03T12:00:00Z",
        expected: &[
            "2027-04-03T13:15:00Z",
            "2027-04-03T13:45:00Z",
            "2027-04-03T14:15:00Z",
            "2027-04-03T14:45:00Z",
        ],
    },
    // Sao Paulo's midnight change: the day starts at 01:00.
    Vector {
        expression: "0 0 * * *",
        zone: "America/Sao_Paulo",
        policy: CRONIE,
        from: "2018-11-03T12:00:00Z",
        expected: &["2018-11-04T03:00:00Z", "2018-11-05T02:00:00Z"],
    },
    // The day rule: a day field starting with `*` makes both fields count.
    Vector {
        expression: "43 9 */5 6 */7",
        zone: "UTC",
        policy: CRONIE,
        from: "2025-01-01T00:00:00Z",
        expected: &[
            "2025-06-01T09:43:00Z",
            "2026-06-21T09:43:00Z",
            "2027-06-06T09:43:00Z",
        ],
    },
    Vector {
        expression: "* * */10 * Sun",
        zone: "UTC",
        policy: CRONIE,
        from: "2026-01-11T23:58:00Z",
        expected: &["2026-01-11T23:59:00Z", "2026-02-01T00:00:00Z"],
    },
    // Both restricted, neither starting with `*`: either field.
    Vector {
        expression: "0 0 1,15 * Sun",
        zone: "UTC",
        policy: CRONIE,
        from: "2026-01-01T00:00:00Z",
        expected: &[
            "2026-01-04T00:00:00Z",
            "2026-01-11T00:00:00Z",
            "2026-01-15T00:00:00Z",
            "2026-01-18T00:00:00Z",
        ],
    },
    // `5-0` is Friday to Sunday.
    Vector {
        expression: "0 0 * * 5-0",
        zone: "UTC",
        policy: CRONIE,
        from: "2026-01-01T00:00:00Z",
        expected: &[
            "2026-01-02T00:00:00Z",
            "2026-01-03T00:00:00Z",
            "2026-01-04T00:00:00Z",
            "2026-01-09T00:00:00Z",
        ],
    },
];

/// The model's fire times for `vector` up to its last expected one, or
/// what is wrong with the vector.
fn model_check(vector: &Vector) -> Result<(), String> {
    let schedule = parse_as_cronlease(vector.expression)
        .map_err(|refusal| format!("the model refuses it: {}", refusal.message))?;
    let from = parse_instant(vector.from);
    let until = parse_instant(
        vector
            .expected
            .last()
            .expect("a vector expects a fire time"),
    );
    let fired: Vec<String> = fires(&schedule, zone(vector.zone), vector.policy, from, until)
        .into_iter()
        .map(rfc3339)
        .collect();
    if fired == vector.expected {
        Ok(())
    } else {
        Err(format!("the model fires at {fired:?}"))
    }
}

/// Compares `vector` with cronlease and with the model; returns what
/// differs.
fn check(vector: &Vector) -> Vec<String> {
    let describe = |problem: &str| {
        format!(
            "{:?} in {} (dst_gap = {}, dst_repeat = {}) from {}: expected {:?}, {problem}",
            vector.expression,
            vector.zone,
            gap_name(vector.policy.gap),
            repeat_name(vector.policy.repeat),
            vector.from,
            vector.expected
        )
    };
    let mut problems = Vec::new();
    if let Err(problem) = model_check(vector) {
        problems.push(describe(&problem));
    }
    let job = Job {
        name: "j0001".to_owned(),
        expression: vector.expression.to_owned(),
        zone: zone(vector.zone),
        policy: vector.policy,
        spell_out_policy: false,
    };
    let file = ConfigFile::new(&config_text([&job]));
    let run = check_config(&file, parse_instant(vector.from), vector.expected.len());
    if run.code() != Some(0) {
        problems.push(describe(&format!("check failed\n{}", run.describe())));
        return problems;
    }
    let next: Vec<String> = checked_jobs(&run)
        .remove("j0001")
        .map(|job| job.next.into_iter().map(rfc3339).collect())
        .unwrap_or_default();
    if next != vector.expected {
        problems.push(describe(&format!("cronlease fires at {next:?}")));
    }
    problems
}

#[test]
fn dst_vectors() {
    let problems: Vec<String> = VECTORS.iter().flat_map(check).collect();
    assert!(
        problems.is_empty(),
        "{} problems:\n{}",
        problems.len(),
        problems.join("\n")
    );
}

/// The same vectors against the model alone: when `dst_vectors` fails,
/// this says whether the model or cronlease is off.
#[test]
fn dst_vectors_hold_in_the_reference_model() {
    let problems: Vec<String> = VECTORS
        .iter()
        .filter_map(|vector| {
            model_check(vector).err().map(|problem| {
                format!(
                    "{:?} in {} from {}: {problem}",
                    vector.expression, vector.zone, vector.from
                )
            })
        })
        .collect();
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
