//! A reference model of Vixie cron as cronie ships it: which crontab time
//! expressions it accepts, and at which real instants its main loop starts a
//! job, across DST changes. The differential tests (`cron_differential`)
//! compare cronlease's schedule engine against it.
//!
//! The model is independent of cronlease: it was written from cronie's
//! `src/entry.c` (`load_entry`, `get_list`, `get_range`, `get_number`: the
//! parser) and `src/cron.c` (the main loop's `timeDiff` and its small /
//! medium / negative / large cases, and `find_jobs`), not from cronlease's
//! code. So where the two agree, they agree because both follow cronie, not
//! because they share a mistake. It is deliberately naive where it can
//! afford to be: it steps through real time minute by minute near clock
//! changes, as the daemon does, and only jumps ahead over stretches where
//! the clock runs steadily and every minute is cron.c's `timeDiff == 1`
//! case.
//!
//! cronlease differs from cronie on purpose in a few places; each is a
//! [`Deviation`], listed in [`DEVIATIONS`] with one line each, and applied
//! where the model meets it: [`parse`] reads an expression as cronie does,
//! [`parse_as_cronlease`] as cronlease should (cronie's reading with the
//! deviations), and [`fires`] simulates cronie's loop with the deviations
//! about clock changes. Where cronlease does as cronie does, the model says
//! nothing more: month and weekday names are three letters in any case,
//! numbers may have leading zeros, 0 and 7 are Sunday.
//!
//! What the model leaves out of cronie, because it is not part of when a
//! job with a given expression runs: `CRON_TZ` and a system zone other than
//! the job's (the model runs the daemon in the job's zone, as if TZ were
//! set to it), `RANDOM_DELAY`, the `-` that starts a line to silence its
//! log, `@reboot` at start-up, and the time jobs take (cronie's medium case
//! sleeps 10 s after each skipped minute that ran something, and stops
//! catching up when the real minute changes; the model catches up at
//! once). It also takes the zone's real offset at every minute, where
//! `set_time` re-reads it only when `tm_isdst` flips: a zone changing its
//! standard offset would leave cronie's clock off until its next DST
//! change (none of the zones the tests use does so in 2000-2090).

use chrono::{DateTime, Offset, TimeZone, Utc};
use chrono_tz::Tz;

/// A way cronlease deliberately differs from cronie. The letters are the
/// ones of the design notes; [`DEVIATIONS`] lists them all.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Deviation {
    /// a. A clock change of more than 3 hours is handled like a DST change.
    LargeClockChange,
    /// b. A reversed range (`22-2`) is refused, except day-of-week `x-0`.
    ReversedRange,
    /// c. A range bound outside its field is refused even when a step skips it.
    BoundOutOfRange,
    /// d. `~` (a random value) is refused.
    RandomValue,
    /// e. cronlease accepts syntax cronie refuses (`N/step`, `?`, `L`, `W`, `#`, `H`, seconds).
    Extension,
    /// f. Macros are read in any letter case, and `@reboot` is refused.
    Macro,
    /// g. An expression that matches no date at all is refused.
    MatchesNoDate,
    /// i. A job starts at most once per real minute, even after a forward jump.
    OneStartPerRealMinute,
}

/// Every deviation, in the order of the design notes.
pub const DEVIATIONS: [Deviation; 8] = [
    Deviation::LargeClockChange,
    Deviation::ReversedRange,
    Deviation::BoundOutOfRange,
    Deviation::RandomValue,
    Deviation::Extension,
    Deviation::Macro,
    Deviation::MatchesNoDate,
    Deviation::OneStartPerRealMinute,
];

impl Deviation {
    /// The letter the design notes give the deviation.
    pub fn letter(self) -> char {
        match self {
            Deviation::LargeClockChange => 'a',
            Deviation::ReversedRange => 'b',
            Deviation::BoundOutOfRange => 'c',
            Deviation::RandomValue => 'd',
            Deviation::Extension => 'e',
            Deviation::Macro => 'f',
            Deviation::MatchesNoDate => 'g',
            Deviation::OneStartPerRealMinute => 'i',
        }
    }

    /// What cronlease does instead of what cronie does, in one line.
    pub fn summary(self) -> &'static str {
        match self {
            Deviation::LargeClockChange => {
                "a clock change of more than 3 hours is a DST change (medium or negative case); \
                 cronie jumps its virtual time and runs every job matching the new minute"
            }
            Deviation::ReversedRange => {
                "a range whose end is below its start is refused, except `x-0` in day-of-week \
                 (= `x-7`, with or without a step); cronie sets nothing for it, and reads `x-0` \
                 as `x-7` in every field but only without a step"
            }
            Deviation::BoundOutOfRange => {
                "a range bound outside the field is refused; cronie only refuses the values a \
                 step reaches (`0-70/100` is minute 0)"
            }
            Deviation::RandomValue => {
                "`~` is refused (each replica would pick its own value); cronie picks one at load"
            }
            Deviation::Extension => {
                "`N/step`, `?`, `L`, `LW`, `nW`, `nL`, `n#k`, `H`, `H(a-b)`, `H/n`, 6 fields \
                 with seconds and seconds other than 0 are accepted; cronie refuses them"
            }
            Deviation::Macro => {
                "macros are read in any letter case and `@reboot` is refused; cronie reads \
                 lower case only and accepts `@reboot`"
            }
            Deviation::MatchesNoDate => {
                "an expression that matches no date (`0 0 30 2 *`) is refused; cronie loads it \
                 and never runs it"
            }
            Deviation::OneStartPerRealMinute => {
                "after a forward jump a fixed-time job starts once however many skipped minutes \
                 it matches; cronie runs its queue between the skipped minutes, so it starts \
                 the job once per matching minute, 10 s apart"
            }
        }
    }
}

/// Deviation a: cronie's "large" case (a clock change of more than 3
/// hours: jump the virtual clock, run everything matching the new minute)
/// is replaced by the medium (forward) or negative (backward) case.
/// No zone the tests use changes its clock by that much in 2000-2090.
const LARGE_CLOCK_CHANGES_ARE_DST_CHANGES: bool = true;

/// Deviation i: fixed-time jobs found for several skipped minutes after a
/// forward jump start once, at the real minute the daemon noticed the jump.
/// cronie's medium case calls `job_runqueue()` before each skipped minute,
/// so there it would start once per matching minute; the model, like
/// cronlease, collects one start per real minute (the de-duplication
/// `job_add` does within one queue). With `false`, [`fires`] lists such a
/// minute once per start, as cronie would (10 s apart).
const ONE_START_PER_REAL_MINUTE: bool = true;

/// cron.c's `MINUTE_COUNT`: a change of more than 3 of these hours is large.
const LARGE_CHANGE_MINUTES: i64 = 3 * 60;

/// cron.c: a forward change of more than 5 minutes is "medium" (DST), of 2
/// to 5 "small" (the daemon woke up late).
const SMALL_CHANGE_MAX_MINUTES: i64 = 5;

/// macros.h's `MAX_TEMPSTR`: `get_number` refuses a word this long.
const MAX_NUMBER_WORD: usize = 131_072;

/// How a fixed-time job meets the minutes a forward clock change skips.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DstGap {
    /// cronie: run it once, at the first real minute after the jump.
    #[default]
    RunAfter,
    /// Do not run it for skipped minutes (it still runs when its time is
    /// the wall minute the clock jumped to).
    Skip,
}

/// How a fixed-time job meets the minutes a backward clock change repeats.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DstRepeat {
    /// cronie: run it the first time only.
    #[default]
    First,
    /// Run it the second time too, by the wall clock as it is.
    Both,
}

/// cronlease's per-job DST options for fixed-time jobs; the default is
/// exactly cronie. Wildcard jobs ignore them, as cronie's do.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DstPolicy {
    pub gap: DstGap,
    pub repeat: DstRepeat,
}

/// A parsed expression: the sets of values cronie's `entry` holds, and the
/// flags `load_entry` sets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RefSchedule {
    /// Bit m: minute m (0-59).
    pub minutes: u64,
    /// Bit h: hour h (0-23).
    pub hours: u64,
    /// Bit d: day of month d (1-31).
    pub days_of_month: u64,
    /// Bit m: month m (1-12).
    pub months: u64,
    /// Bit d: weekday d (0-7; 0 and 7 are Sunday and are always both set
    /// or both clear, as `load_entry` makes them).
    pub days_of_week: u64,
    /// The 7-field form's years, as inclusive ranges; `None`: every year.
    pub years: Option<Vec<(i64, i64)>>,
    /// `MIN_STAR`: the minute field starts with `*`.
    pub minute_star: bool,
    /// `HR_STAR`: the hour field starts with `*`.
    pub hour_star: bool,
    /// `DOM_STAR`: the day-of-month field starts with `*`.
    pub day_of_month_star: bool,
    /// `DOW_STAR`: the day-of-week field starts with `*`.
    pub day_of_week_star: bool,
    /// Set by [`parse_as_cronlease`] when cronlease reads the expression
    /// and cronie refuses it or reads other times: the deviation why.
    pub differs_from_cronie: Option<Deviation>,
}

/// Why cronlease refuses an expression, per the model.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    pub message: String,
    /// The deviation, when cronie accepts the expression; `None` when
    /// cronie refuses it too.
    pub deviation: Option<Deviation>,
}

impl RefSchedule {
    /// Whether cronie treats the job as fixed-time (`!(flags & (MIN_STAR |
    /// HR_STAR))`): run for skipped minutes, not for repeated ones. The
    /// others are wildcard jobs, run by the wall clock as it is.
    pub fn is_fixed_time(&self) -> bool {
        !(self.minute_star || self.hour_star)
    }

    /// `find_jobs`' date test: the month and the year, and the day fields
    /// combined with AND when either starts with `*`, else with OR.
    fn date_matches(&self, date: CivilDate) -> bool {
        if self.months & (1 << date.month) == 0 || !self.year_matches(date.year) {
            return false;
        }
        let day_of_month = self.days_of_month & (1 << date.day) != 0;
        let day_of_week = self.days_of_week & (1 << date.weekday) != 0;
        if self.day_of_month_star || self.day_of_week_star {
            day_of_month && day_of_week
        } else {
            day_of_month || day_of_week
        }
    }

    fn year_matches(&self, year: i64) -> bool {
        match &self.years {
            None => true,
            Some(ranges) => ranges
                .iter()
                .any(|&(first, last)| first <= year && year <= last),
        }
    }

    /// Whether `find_jobs` would find the job at this wall-clock minute
    /// (minutes since 1970-01-01 00:00 of the local calendar).
    fn matches_wall_minute(&self, wall_minute: i64) -> bool {
        let minute_of_day = wall_minute.rem_euclid(MINUTES_PER_DAY);
        self.minutes & (1 << (minute_of_day % 60)) != 0
            && self.hours & (1 << (minute_of_day / 60)) != 0
            && self.date_matches(CivilDate::of_day(wall_minute.div_euclid(MINUTES_PER_DAY)))
    }

    /// The wall minutes in `first..=last` the job matches, in order,
    /// visiting only the days whose date matches.
    fn matching_wall_minutes(&self, first: i64, last: i64, found: &mut impl FnMut(i64)) {
        for day in first.div_euclid(MINUTES_PER_DAY)..=last.div_euclid(MINUTES_PER_DAY) {
            if !self.date_matches(CivilDate::of_day(day)) {
                continue;
            }
            for hour in set_bits(self.hours) {
                for minute in set_bits(self.minutes) {
                    let wall_minute = day * MINUTES_PER_DAY + hour * 60 + minute;
                    if first <= wall_minute && wall_minute <= last {
                        found(wall_minute);
                    }
                }
            }
        }
    }

    /// Whether some date of the Gregorian calendar in 1970-9999 matches
    /// (with some minute and hour).
    pub fn matches_some_date(&self) -> bool {
        if self.minutes == 0 || self.hours == 0 || self.months == 0 {
            return false;
        }
        match &self.years {
            None => self.some_month_and_day_match(),
            Some(ranges) => self.some_date_in_years_matches(ranges),
        }
    }

    /// Without a year field: every month and day (February 29 included)
    /// falls on every weekday in some year, so only the day-of-month
    /// field's days that exist in a month of the month field matter.
    fn some_month_and_day_match(&self) -> bool {
        let some_day_of_month = set_bits(self.months).any(|month| {
            let longest = days_in_month(2000, month);
            self.days_of_month & (((1u64 << (longest + 1)) - 1) & !1) != 0
        });
        let some_weekday = self.days_of_week != 0;
        if self.day_of_month_star || self.day_of_week_star {
            some_day_of_month && some_weekday
        } else {
            some_day_of_month || some_weekday
        }
    }

    /// With a year field: the calendar, weekdays included, repeats every
    /// 400 years, so one year of each residue class in the ranges is tried.
    fn some_date_in_years_matches(&self, ranges: &[(i64, i64)]) -> bool {
        let mut seen_class = [false; 400];
        for &(first, last) in ranges {
            for year in first..=last.min(first + 399) {
                let class = year.rem_euclid(400) as usize;
                if seen_class[class] {
                    continue;
                }
                seen_class[class] = true;
                for month in set_bits(self.months) {
                    let first_day = days_from_civil(year, month, 1);
                    let days = days_in_month(year, month);
                    if (first_day..first_day + days)
                        .any(|day| self.date_matches(CivilDate::of_day(day)))
                    {
                        return true;
                    }
                }
            }
        }
        false
    }
}

/// The number of days of `month` (1-12) in `year`.
fn days_in_month(year: i64, month: i64) -> i64 {
    days_from_civil(year + i64::from(month == 12), month % 12 + 1, 1)
        - days_from_civil(year, month, 1)
}

/// Reads `expression` as cronie does: 5 fields (minute hour day-of-month
/// month day-of-week) with `entry.c`'s grammar, or a macro (lower case), or
/// cronlease's 7-field form `0 MIN HOUR DOM MON DOW YEAR` (seconds 0, the
/// year a number, range, list or `*` in 1970-9999), which cronie lacks but
/// reads the same way in its five middle fields.
///
/// Accepts what cronie accepts even when cronie never runs it (a reversed
/// range sets nothing) and `@reboot` (no times at all). `~` picks the
/// lowest value of its range, where cronie picks one at random.
pub fn parse(expression: &str) -> Result<RefSchedule, String> {
    parse_in(expression, Dialect::Cronie).map_err(|refusal| refusal.message)
}

/// Reads `expression` as cronlease should: cronie's reading with the
/// deviations b, c, d, f and g. Extensions (e) are not read: the model
/// refuses them, with `deviation: None`; see [`cronlease_extension`].
pub fn parse_as_cronlease(expression: &str) -> Result<RefSchedule, Refusal> {
    match parse_in(expression, Dialect::Cronlease) {
        Ok(schedule) => Ok(schedule),
        Err(mut refusal) => {
            if refusal.deviation.is_some() && parse(expression).is_err() {
                refusal.deviation = None;
            }
            Err(refusal)
        }
    }
}

/// The extension (deviation e) `expression` uses, if any: syntax cronie
/// refuses and cronlease accepts, which the model does not read. Matches
/// whole list items only, so month and weekday names (`Wed`, `JUL`) are not
/// mistaken for `W` and `L`.
pub fn cronlease_extension(expression: &str) -> Option<&'static str> {
    let fields: Vec<&str> = expression.split_ascii_whitespace().collect();
    let (seconds, five): (Option<&str>, &[&str]) = match fields.len() {
        6 => return Some("6 fields with leading seconds"),
        7 => (Some(fields[0]), &fields[1..6]),
        _ => (None, &fields[..]),
    };
    if seconds.is_some_and(|seconds| seconds != "0") {
        return Some("seconds other than 0");
    }
    for (field_index, field) in five.iter().enumerate() {
        for item in field.split(',') {
            let upper = item.to_ascii_uppercase();
            if upper == "H" || upper.starts_with("H(") || upper.starts_with("H/") {
                return Some("Jenkins H");
            }
            if let Some((base, step)) = upper.split_once('/') {
                let base_is_value = !base.is_empty()
                    && base != "*"
                    && !base.contains('-')
                    && base.bytes().all(|byte| byte.is_ascii_alphanumeric());
                if base_is_value && all_digits(step) {
                    return Some("N/step");
                }
            }
            let is_day_field = field_index == 2 || field_index == 4;
            if is_day_field && upper == "?" {
                return Some("? in a day field");
            }
            if field_index == 2 {
                let quartz = upper == "L"
                    || upper == "LW"
                    || upper.strip_prefix("L-").is_some_and(all_digits)
                    || upper.strip_suffix('W').is_some_and(all_digits);
                if quartz {
                    return Some("Quartz L/W in day-of-month");
                }
            }
            if field_index == 4 {
                let is_day = |text: &str| {
                    all_digits(text)
                        || DAY_OF_WEEK_NAMES
                            .iter()
                            .any(|name| name.eq_ignore_ascii_case(text))
                };
                let quartz = upper == "L"
                    || upper.strip_suffix('L').is_some_and(is_day)
                    || upper
                        .split_once('#')
                        .is_some_and(|(day, nth)| is_day(day) && all_digits(nth));
                if quartz {
                    return Some("Quartz L/# in day-of-week");
                }
            }
        }
    }
    None
}

fn all_digits(text: &str) -> bool {
    !text.is_empty() && text.bytes().all(|byte| byte.is_ascii_digit())
}

/// The instants in `(from_utc, to_utc]` at which cronie's main loop would
/// start a job with `schedule`, running with `TZ=zone` (as if the system's
/// zone were the job's, so that cron.c's DST logic applies to it) and
/// waking at the start of every real minute.
///
/// For each real minute the model computes the wall-clock minute
/// (`clockTime`), its difference from `virtualTime`, and follows cron.c: a
/// difference of 1 runs what matches the minute; a small jump (2-5 minutes)
/// runs what matches each minute caught up; a medium one (forward, over 5)
/// runs wildcard jobs for the new minute and fixed-time jobs for every
/// minute from the old one to the new one; a negative one (backward, or no
/// move) runs wildcard jobs only and leaves `virtualTime` where it was, so
/// fixed-time jobs do not run again until the clock has caught up. The
/// `policy` changes the fixed-time part of the medium and negative cases.
/// A start is recorded at the real minute `find_jobs` queues the job.
///
/// The simulation starts two days before `from_utc` (assuming the daemon
/// has run steadily, so `virtualTime` is the latest wall minute seen; every
/// backward change the zones have made is under two days), and jumps over
/// stretches without a clock change where every minute is the
/// `timeDiff == 1` case, visiting only the days whose date matches.
pub fn fires(
    schedule: &RefSchedule,
    zone: Tz,
    policy: DstPolicy,
    from_utc: DateTime<Utc>,
    to_utc: DateTime<Utc>,
) -> Vec<DateTime<Utc>> {
    let first_reported = from_utc.timestamp().div_euclid(60) + 1;
    let last_reported = to_utc.timestamp().div_euclid(60);
    if last_reported < first_reported {
        return Vec::new();
    }
    let simulation_start = first_reported - WARM_UP_MINUTES;
    let timeline = OffsetTimeline::new(zone, simulation_start, last_reported);
    let (start_offset_seconds, _) = timeline.segment_at(simulation_start, last_reported);
    let start_wall = wall_minute(simulation_start, start_offset_seconds);
    let mut daemon = Daemon {
        time_running: start_wall,
        virtual_time: start_wall,
    };
    let mut started_minutes = Vec::new();
    let mut real_minute = simulation_start + 1;
    while real_minute <= last_reported {
        let (offset_seconds, segment_end) = timeline.segment_at(real_minute, last_reported);
        let wall = wall_minute(real_minute, offset_seconds);
        let steady = daemon.virtual_time == daemon.time_running && wall == daemon.time_running + 1;
        if steady {
            // The offset is constant up to the segment's end, so every
            // minute until then is `timeDiff == 1`: the job starts exactly
            // at the minutes it matches.
            let last_wall = wall + (segment_end - 1 - real_minute);
            let segment_first_real = real_minute;
            schedule.matching_wall_minutes(wall, last_wall, &mut |matched_wall| {
                let started = segment_first_real + (matched_wall - wall);
                if started >= first_reported {
                    started_minutes.push(started);
                }
            });
            daemon.time_running = last_wall;
            daemon.virtual_time = last_wall;
            real_minute = segment_end;
            continue;
        }
        let starts = daemon.wake(schedule, policy, wall);
        if real_minute >= first_reported {
            started_minutes.extend(std::iter::repeat_n(real_minute, starts));
        }
        real_minute += 1;
    }
    started_minutes
        .into_iter()
        .map(|minute| {
            DateTime::<Utc>::from_timestamp(minute * 60, 0)
                .expect("a minute between two valid instants is a valid instant")
        })
        .collect()
}

const MINUTES_PER_DAY: i64 = 24 * 60;

/// How long before the first reported minute the simulation starts.
const WARM_UP_MINUTES: i64 = 2 * MINUTES_PER_DAY;

/// The model looks up the zone's offset this often and bisects between two
/// lookups that differ. It assumes a zone never changes its offset twice
/// within this time, which holds for every zone in 1970-2099 (DST changes
/// are months apart). Lookups are cheap, so the margin is wide.
const OFFSET_SAMPLE_MINUTES: i64 = 60;

/// cron.c's clocks, in minutes since 1970-01-01 00:00 of the wall clock
/// (the real time plus the zone's offset, as `set_time` computes them).
struct Daemon {
    /// `timeRunning`: the wall minute the daemon last woke up at.
    time_running: i64,
    /// `virtualTime`: every job up to this wall minute has been run.
    virtual_time: i64,
}

/// cron.c's classification of `timeDiff` (other than 1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ClockChange {
    /// 2-5 minutes forward: woke up late.
    Small,
    /// 6 minutes to 3 hours forward: DST began.
    Medium,
    /// Backward, or not moved: DST ended.
    Negative,
    /// More than 3 hours either way.
    Large,
}

impl ClockChange {
    fn classify(time_difference: i64) -> ClockChange {
        let cronie = if !(-LARGE_CHANGE_MINUTES..=LARGE_CHANGE_MINUTES).contains(&time_difference) {
            ClockChange::Large
        } else if time_difference > SMALL_CHANGE_MAX_MINUTES {
            ClockChange::Medium
        } else if time_difference > 0 {
            ClockChange::Small
        } else {
            ClockChange::Negative
        };
        match cronie {
            ClockChange::Large if LARGE_CLOCK_CHANGES_ARE_DST_CHANGES => {
                if time_difference > 0 {
                    ClockChange::Medium
                } else {
                    ClockChange::Negative
                }
            }
            other => other,
        }
    }
}

impl Daemon {
    /// One turn of cron.c's main loop when the real time reaches a new
    /// minute whose wall-clock minute is `wall`: how many times the job
    /// starts in this real minute (0 or 1, see deviation i).
    fn wake(&mut self, schedule: &RefSchedule, policy: DstPolicy, wall: i64) -> usize {
        if wall == self.time_running {
            // `clockTime == timeRunning`: cron_sleep goes on sleeping.
            return 0;
        }
        self.time_running = wall;
        let time_difference = wall - self.virtual_time;
        if time_difference == 1 {
            self.virtual_time = wall;
            return usize::from(schedule.matches_wall_minute(wall));
        }
        let fixed_time = schedule.is_fixed_time();
        match ClockChange::classify(time_difference) {
            ClockChange::Small => {
                let caught_up = self.virtual_time + 1..=wall;
                self.virtual_time = wall;
                starts_for_minutes(schedule, caught_up)
            }
            ClockChange::Medium => {
                let skipped = self.virtual_time + 1..=wall;
                self.virtual_time = wall;
                if !fixed_time {
                    return usize::from(schedule.matches_wall_minute(wall));
                }
                match policy.gap {
                    DstGap::RunAfter => starts_for_minutes(schedule, skipped),
                    DstGap::Skip => usize::from(schedule.matches_wall_minute(wall)),
                }
            }
            ClockChange::Negative => {
                let runs_now = !fixed_time || policy.repeat == DstRepeat::Both;
                usize::from(runs_now && schedule.matches_wall_minute(wall))
            }
            ClockChange::Large => {
                self.virtual_time = wall;
                usize::from(schedule.matches_wall_minute(wall))
            }
        }
    }
}

/// How often the job starts when `find_jobs` is called, within one real
/// minute, for each of `minutes`: cronie runs its queue between them, so
/// once per matching minute; cronlease once in all (deviation i).
fn starts_for_minutes(schedule: &RefSchedule, minutes: std::ops::RangeInclusive<i64>) -> usize {
    let matching = minutes
        .filter(|&minute| schedule.matches_wall_minute(minute))
        .count();
    if ONE_START_PER_REAL_MINUTE {
        matching.min(1)
    } else {
        matching
    }
}

/// The zone's UTC offset over the simulated stretch, as segments of
/// constant offset.
struct OffsetTimeline {
    /// (first real minute, offset in seconds), in order; the first starts
    /// at the stretch's start.
    segments: Vec<(i64, i64)>,
}

impl OffsetTimeline {
    fn new(zone: Tz, first_minute: i64, last_minute: i64) -> OffsetTimeline {
        let lookup = |minute: i64| offset_seconds(zone, minute);
        let mut segments = vec![(first_minute, lookup(first_minute))];
        let mut sampled = first_minute;
        let mut sampled_offset = segments[0].1;
        while sampled < last_minute {
            let next = (sampled + OFFSET_SAMPLE_MINUTES).min(last_minute);
            let next_offset = lookup(next);
            if next_offset != sampled_offset {
                // Bisect for the first minute with the new offset.
                let (mut before, mut after) = (sampled, next);
                while after - before > 1 {
                    let middle = before + (after - before) / 2;
                    if lookup(middle) == sampled_offset {
                        before = middle;
                    } else {
                        after = middle;
                    }
                }
                segments.push((after, next_offset));
            }
            sampled = next;
            sampled_offset = next_offset;
        }
        OffsetTimeline { segments }
    }

    /// The offset at `minute` and the first minute after its segment (at
    /// most `last_minute + 1`).
    fn segment_at(&self, minute: i64, last_minute: i64) -> (i64, i64) {
        let index = self
            .segments
            .iter()
            .rposition(|&(start, _)| start <= minute)
            .unwrap_or(0);
        let end = self
            .segments
            .get(index + 1)
            .map_or(last_minute + 1, |&(start, _)| start.min(last_minute + 1));
        (self.segments[index].1, end)
    }
}

fn offset_seconds(zone: Tz, minute: i64) -> i64 {
    DateTime::<Utc>::from_timestamp(minute * 60, 0).map_or(0, |instant| {
        i64::from(
            zone.offset_from_utc_datetime(&instant.naive_utc())
                .fix()
                .local_minus_utc(),
        )
    })
}

/// `clockTime` at the start of real minute `real_minute`.
fn wall_minute(real_minute: i64, offset_seconds: i64) -> i64 {
    (real_minute * 60 + offset_seconds).div_euclid(60)
}

/// A date of the proleptic Gregorian calendar.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct CivilDate {
    year: i64,
    month: u32,
    day: u32,
    /// 0 = Sunday, as `tm_wday`.
    weekday: u32,
}

impl CivilDate {
    /// The date of day `day` counted from 1970-01-01 (Howard Hinnant's
    /// `civil_from_days`), computed here rather than by chrono so that a
    /// calendar mistake would have to be made twice to go unnoticed.
    fn of_day(day: i64) -> CivilDate {
        let shifted = day + 719_468;
        let era = shifted.div_euclid(146_097);
        let day_of_era = shifted.rem_euclid(146_097);
        let year_of_era =
            (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
        let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
        let month_from_march = (5 * day_of_year + 2) / 153;
        let day_of_month = day_of_year - (153 * month_from_march + 2) / 5 + 1;
        let month = if month_from_march < 10 {
            month_from_march + 3
        } else {
            month_from_march - 9
        };
        let year = year_of_era + era * 400 + i64::from(month <= 2);
        CivilDate {
            year,
            month: month as u32,
            day: day_of_month as u32,
            // 1970-01-01 was a Thursday.
            weekday: (day + 4).rem_euclid(7) as u32,
        }
    }
}

/// The day number (from 1970-01-01) of a date: Hinnant's
/// `days_from_civil`.
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year.rem_euclid(400);
    let month_from_march = (month + 9) % 12;
    let day_of_year = (153 * month_from_march + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

/// The positions of the set bits of `bits`, lowest first.
fn set_bits(bits: u64) -> impl Iterator<Item = i64> {
    (0..64).filter(move |bit| bits & (1 << bit) != 0)
}

// ---------------------------------------------------------------------------
// The parser: entry.c's load_entry / get_list / get_range / get_number.

/// Whose rules the parser follows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Dialect {
    Cronie,
    Cronlease,
}

/// globals.h's `MonthNames`.
const MONTH_NAMES: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];

/// globals.h's `DowNames`: Sunday twice, so `Sun` is found as 0 first.
const DAY_OF_WEEK_NAMES: [&str; 8] = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"];

/// One of the five fields: its range and names (`FIRST_`/`LAST_` in
/// cron.h), and the word of cronie's error (`ecodes` in entry.c).
struct FieldRules {
    error: &'static str,
    low: i64,
    high: i64,
    names: &'static [&'static str],
    is_day_of_week: bool,
}

const MINUTE_FIELD: FieldRules = FieldRules {
    error: "bad minute",
    low: 0,
    high: 59,
    names: &[],
    is_day_of_week: false,
};
const HOUR_FIELD: FieldRules = FieldRules {
    error: "bad hour",
    low: 0,
    high: 23,
    names: &[],
    is_day_of_week: false,
};
const DAY_OF_MONTH_FIELD: FieldRules = FieldRules {
    error: "bad day-of-month",
    low: 1,
    high: 31,
    names: &[],
    is_day_of_week: false,
};
const MONTH_FIELD: FieldRules = FieldRules {
    error: "bad month",
    low: 1,
    high: 12,
    names: &MONTH_NAMES,
    is_day_of_week: false,
};
const DAY_OF_WEEK_FIELD: FieldRules = FieldRules {
    error: "bad day-of-week",
    low: 0,
    high: 7,
    names: &DAY_OF_WEEK_NAMES,
    is_day_of_week: true,
};

/// The first and last year of cronlease's 7-field form.
const FIRST_YEAR: i64 = 1970;
const LAST_YEAR: i64 = 9999;

fn refusal(message: String) -> Refusal {
    Refusal {
        message,
        deviation: None,
    }
}

fn deviation(deviation: Deviation, message: String) -> Refusal {
    Refusal {
        message,
        deviation: Some(deviation),
    }
}

fn parse_in(expression: &str, dialect: Dialect) -> Result<RefSchedule, Refusal> {
    let fields: Vec<&str> = expression.split_ascii_whitespace().collect();
    match fields[..] {
        [single] if single.starts_with('@') => parse_macro(single, dialect),
        [minute, hour, day_of_month, month, day_of_week] => parse_fields(
            [minute, hour, day_of_month, month, day_of_week],
            None,
            dialect,
        ),
        [
            seconds,
            minute,
            hour,
            day_of_month,
            month,
            day_of_week,
            year,
        ] => {
            if seconds != "0" {
                return Err(refusal(format!(
                    "seconds {seconds:?}: the model reads only 0 (cronlease's extension)"
                )));
            }
            let years = parse_years(year)?;
            parse_fields(
                [minute, hour, day_of_month, month, day_of_week],
                Some(years),
                dialect,
            )
        }
        _ if fields.first().is_some_and(|first| first.starts_with('@')) => {
            Err(refusal(format!("a macro stands alone: {expression:?}")))
        }
        _ => Err(refusal(format!(
            "{} fields in {expression:?}: expected 5 (or 7)",
            fields.len()
        ))),
    }
}

fn parse_fields(
    texts: [&str; 5],
    years: Option<Vec<(i64, i64)>>,
    dialect: Dialect,
) -> Result<RefSchedule, Refusal> {
    let rules = [
        &MINUTE_FIELD,
        &HOUR_FIELD,
        &DAY_OF_MONTH_FIELD,
        &MONTH_FIELD,
        &DAY_OF_WEEK_FIELD,
    ];
    let mut sets = [0u64; 5];
    let mut differs_from_cronie = None;
    for ((set, text), rules) in sets.iter_mut().zip(texts).zip(rules) {
        let field = parse_field(text, rules, dialect)?;
        *set = field.bits;
        differs_from_cronie = differs_from_cronie.or(field.differs_from_cronie);
    }
    let [minutes, hours, days_of_month, months, mut days_of_week] = sets;
    // load_entry: "make sundays equivalent".
    if days_of_week & 0b1000_0001 != 0 {
        days_of_week |= 0b1000_0001;
    }
    let schedule = RefSchedule {
        minutes,
        hours,
        days_of_month,
        months,
        days_of_week,
        years,
        minute_star: texts[0].starts_with('*'),
        hour_star: texts[1].starts_with('*'),
        day_of_month_star: texts[2].starts_with('*'),
        day_of_week_star: texts[4].starts_with('*'),
        differs_from_cronie,
    };
    if dialect == Dialect::Cronlease && !schedule.matches_some_date() {
        return Err(deviation(
            Deviation::MatchesNoDate,
            format!("{:?} matches no date", texts.join(" ")),
        ));
    }
    Ok(schedule)
}

/// load_entry's `@` words and the bits and flags it sets for each.
fn parse_macro(word: &str, dialect: Dialect) -> Result<RefSchedule, Refusal> {
    let name = &word[1..];
    let lower = name.to_ascii_lowercase();
    let differs_from_cronie = if name == lower {
        None
    } else if dialect == Dialect::Cronlease {
        Some(Deviation::Macro)
    } else {
        return Err(refusal(format!("bad time specifier {word:?}")));
    };
    let all = |first: i64, last: i64| (first..=last).fold(0u64, |bits, bit| bits | 1 << bit);
    let mut schedule = RefSchedule {
        minutes: 1,
        hours: 1,
        days_of_month: all(1, 31),
        months: all(1, 12),
        days_of_week: all(0, 7),
        years: None,
        minute_star: false,
        hour_star: false,
        day_of_month_star: false,
        day_of_week_star: false,
        differs_from_cronie,
    };
    match lower.as_str() {
        "yearly" | "annually" => {
            schedule.days_of_month = 1 << 1;
            schedule.months = 1 << 1;
            schedule.day_of_week_star = true;
        }
        "monthly" => {
            schedule.days_of_month = 1 << 1;
            schedule.day_of_week_star = true;
        }
        "weekly" => {
            schedule.days_of_week = 1 | 1 << 7;
            schedule.day_of_month_star = true;
        }
        "daily" | "midnight" => {}
        "hourly" => {
            schedule.hours = all(0, 23);
            schedule.hour_star = true;
        }
        "reboot" => {
            if dialect == Dialect::Cronlease {
                return Err(deviation(
                    Deviation::Macro,
                    "@reboot is not a time".to_owned(),
                ));
            }
            // Runs at start-up only: no time matches.
            schedule.minutes = 0;
            schedule.hours = 0;
        }
        _ => return Err(refusal(format!("bad time specifier {word:?}"))),
    }
    Ok(schedule)
}

/// cronlease's year field: `*`, a year, `a-b`, or a list of them.
fn parse_years(text: &str) -> Result<Vec<(i64, i64)>, Refusal> {
    let year = |word: &str| -> Result<i64, Refusal> {
        match word.parse::<i64>() {
            Ok(value) if all_digits(word) && (FIRST_YEAR..=LAST_YEAR).contains(&value) => Ok(value),
            _ => Err(refusal(format!(
                "bad year {word:?} in {text:?}: expected {FIRST_YEAR}-{LAST_YEAR}"
            ))),
        }
    };
    text.split(',')
        .map(|item| {
            if item == "*" {
                return Ok((FIRST_YEAR, LAST_YEAR));
            }
            let (first, last) = match item.split_once('-') {
                Some((first, last)) => (year(first)?, year(last)?),
                None => (year(item)?, year(item)?),
            };
            if first > last {
                return Err(refusal(format!("reversed years {item:?}")));
            }
            Ok((first, last))
        })
        .collect()
}

/// What one field's text sets.
struct ParsedField {
    bits: u64,
    differs_from_cronie: Option<Deviation>,
}

/// The characters of one field, as get_char would return them from the
/// crontab line: the text, then the blank that ended it, then nothing.
struct Cursor<'a> {
    bytes: &'a [u8],
    position: usize,
}

impl Cursor<'_> {
    fn next(&mut self) -> Option<u8> {
        let character = match self.position.cmp(&self.bytes.len()) {
            std::cmp::Ordering::Less => Some(self.bytes[self.position]),
            std::cmp::Ordering::Equal => Some(b' '),
            std::cmp::Ordering::Greater => None,
        };
        self.position += 1;
        character
    }

    /// unget_char.
    fn back(&mut self) {
        self.position = self.position.saturating_sub(1);
    }
}

/// entry.c's `is_separator`: what ends a range.
fn is_separator(character: u8) -> bool {
    matches!(character, b'\t' | b'\n' | b' ' | b',')
}

/// get_list: ranges separated by commas.
fn parse_field(text: &str, rules: &FieldRules, dialect: Dialect) -> Result<ParsedField, Refusal> {
    let mut cursor = Cursor {
        bytes: text.as_bytes(),
        position: 0,
    };
    let mut field = ParsedField {
        bits: 0,
        differs_from_cronie: None,
    };
    while parse_range(&mut cursor, text, rules, dialect, &mut field)? == b',' {}
    Ok(field)
}

/// get_range's states.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum RangeState {
    Start,
    Asterisk,
    Step,
    Terms,
    FirstNumber,
    Range,
    SecondNumber,
    Random,
}

/// get_range: `*`, `*/step`, `n`, `a-b`, `a-b/step`, `[a]~[b]`; sets the
/// values in `field` and returns the separator that ended the range.
fn parse_range(
    cursor: &mut Cursor,
    text: &str,
    rules: &FieldRules,
    dialect: Dialect,
    field: &mut ParsedField,
) -> Result<u8, Refusal> {
    let bad = |why: &str| refusal(format!("{} {text:?}: {why}", rules.error));
    let mut state = RangeState::Start;
    let mut step = 1;
    let (mut first, mut last) = (0, 0);
    let mut bounds_written = false;
    let random = |dialect: Dialect| {
        if dialect == Dialect::Cronlease {
            Err(deviation(
                Deviation::RandomValue,
                format!("{} {text:?}: `~` picks a random value", rules.error),
            ))
        } else {
            Ok(())
        }
    };
    let separator = loop {
        let Some(character) = cursor.next() else {
            return Err(bad("ends early"));
        };
        match state {
            RangeState::Start => {
                if character == b'*' {
                    (first, last) = (rules.low, rules.high);
                    state = RangeState::Asterisk;
                } else if character == b'~' {
                    random(dialect)?;
                    first = rules.low;
                    state = RangeState::Random;
                } else {
                    cursor.back();
                    first = read_number(cursor, text, rules.low, rules.names, dialect)
                        .ok_or_else(|| bad("expected a number or `*`"))?;
                    bounds_written = true;
                    state = RangeState::FirstNumber;
                }
            }
            RangeState::Asterisk => {
                if character == b'/' {
                    state = RangeState::Step;
                } else if is_separator(character) {
                    break character;
                } else {
                    return Err(bad("`*` must stand alone or take a `/step`"));
                }
            }
            RangeState::Step => {
                cursor.back();
                step = read_number(cursor, text, 0, &[], dialect)
                    .filter(|&step| step != 0)
                    .ok_or_else(|| bad("expected a step of 1 or more"))?;
                state = RangeState::Terms;
            }
            RangeState::Terms => {
                if is_separator(character) {
                    break character;
                }
                return Err(bad("unexpected character after the range"));
            }
            RangeState::FirstNumber => {
                if character == b'-' {
                    state = RangeState::Range;
                } else if character == b'~' {
                    random(dialect)?;
                    state = RangeState::Random;
                } else if is_separator(character) {
                    last = first;
                    break character;
                } else {
                    return Err(bad("unexpected character after a number"));
                }
            }
            RangeState::Range => {
                cursor.back();
                last = read_number(cursor, text, rules.low, rules.names, dialect)
                    .ok_or_else(|| bad("expected the end of the range"))?;
                state = RangeState::SecondNumber;
            }
            RangeState::SecondNumber => {
                // cronie turns `x-0` into `x-7` in every field, but only
                // when no step follows (the test comes after the `/` one);
                // cronlease in day-of-week only, step or not.
                let sunday_end = first > last && last == 0;
                if character == b'/' {
                    if sunday_end && dialect == Dialect::Cronlease && rules.is_day_of_week {
                        last = 7;
                        field.differs_from_cronie = Some(Deviation::ReversedRange);
                    }
                    state = RangeState::Step;
                    continue;
                }
                if sunday_end && (dialect == Dialect::Cronie || rules.is_day_of_week) {
                    last = 7;
                }
                if is_separator(character) {
                    break character;
                }
                return Err(bad("unexpected character after a range"));
            }
            RangeState::Random => {
                if is_separator(character) {
                    last = rules.high;
                } else {
                    cursor.back();
                    last = read_number(cursor, text, rules.low, rules.names, dialect)
                        .ok_or_else(|| bad("expected a number after `~`"))?;
                }
                if first > last {
                    return Err(bad("empty random range"));
                }
                // cronie picks at random; the model, the lowest value.
                last = first;
                if is_separator(character) {
                    break character;
                }
                state = RangeState::Terms;
            }
        }
    };
    if dialect == Dialect::Cronlease && bounds_written {
        if first > last {
            return Err(deviation(
                Deviation::ReversedRange,
                format!("{} {text:?}: range {first}-{last} is reversed", rules.error),
            ));
        }
        if first < rules.low || last > rules.high {
            return Err(deviation(
                Deviation::BoundOutOfRange,
                format!(
                    "{} {text:?}: {first}-{last} is outside {}-{}",
                    rules.error, rules.low, rules.high
                ),
            ));
        }
    }
    // set_element for each value the step reaches: cronie refuses only
    // those out of range.
    let mut value = first;
    while value <= last {
        if value < rules.low || value > rules.high {
            return Err(bad(&format!(
                "{value} is outside {}-{}",
                rules.low, rules.high
            )));
        }
        field.bits |= 1 << value;
        value = value.saturating_add(step);
    }
    Ok(separator)
}

/// get_number: a word of letters and digits, read as a decimal number
/// (strtol, then a cast to int: cronie reads 4294967301 as 5) or as one of
/// the field's names in any case. cronlease reads the number as it is.
fn read_number(
    cursor: &mut Cursor,
    text: &str,
    low: i64,
    names: &[&str],
    dialect: Dialect,
) -> Option<i64> {
    let start = cursor.position;
    while cursor
        .next()
        .is_some_and(|character| character.is_ascii_alphanumeric())
    {}
    cursor.back();
    let word = text.get(start..cursor.position.min(text.len()))?;
    if word.is_empty() || word.len() >= MAX_NUMBER_WORD {
        return None;
    }
    if all_digits(word) {
        // strtol saturates at LONG_MAX.
        let value = word.parse::<i64>().unwrap_or(i64::MAX);
        return Some(match dialect {
            Dialect::Cronie => i64::from(value as i32),
            Dialect::Cronlease => value,
        });
    }
    names
        .iter()
        .position(|name| name.eq_ignore_ascii_case(word))
        .map(|index| index as i64 + low)
}

#[cfg(test)]
mod tests {
    //! The parser's quirks, each read off entry.c, and the calendar.

    use super::*;

    fn bits(values: &[i64]) -> u64 {
        values.iter().fold(0, |bits, value| bits | 1 << value)
    }

    #[test]
    fn cronie_reads_x_0_as_x_7_in_every_field_but_not_before_a_step() {
        let hour = parse("0 5-0 * * *").expect("cronie accepts hour 5-0");
        assert_eq!(hour.hours, bits(&[5, 6, 7]));
        let weekend = parse("0 0 * * 5-0").expect("cronie accepts 5-0");
        assert_eq!(weekend.days_of_week, bits(&[0, 5, 6, 7]));
        let stepped = parse("0 0 1 * 5-0/1").expect("cronie accepts 5-0/1");
        assert_eq!(stepped.days_of_week, 0);
        let minute = parse("10-0 * * * *").expect("cronie accepts minute 10-0");
        assert_eq!(minute.minutes, 0, "10-7 sets nothing");

        let refused = parse_as_cronlease("0 5-0 * * *").expect_err("cronlease refuses");
        assert_eq!(refused.deviation, Some(Deviation::ReversedRange));
        let weekend = parse_as_cronlease("0 0 * * 5-0").expect("cronlease accepts 5-0");
        assert_eq!(weekend.days_of_week, bits(&[0, 5, 6, 7]));
        let stepped = parse_as_cronlease("0 0 1 * 5-0/1").expect("x-0/step is x-7/step");
        assert_eq!(stepped.days_of_week, bits(&[0, 5, 6, 7]));
        assert_eq!(stepped.differs_from_cronie, Some(Deviation::ReversedRange));
    }

    #[test]
    fn cronie_refuses_only_the_values_a_step_reaches() {
        assert_eq!(parse("0-70/100 * * * *").map(|s| s.minutes), Ok(1));
        assert!(parse("50-70 * * * *").is_err());
        assert!(parse("70-5 * * * *").is_ok_and(|s| s.minutes == 0));
        let refused = parse_as_cronlease("0-70/100 * * * *").expect_err("bound 70");
        assert_eq!(refused.deviation, Some(Deviation::BoundOutOfRange));
        let refused = parse_as_cronlease("50-70 * * * *").expect_err("bound 70");
        assert_eq!(refused.deviation, None, "cronie refuses it too");
    }

    #[test]
    fn malformed_ranges_are_refused_by_both() {
        for expression in [
            "*5 * * * *",
            "5- * * * *",
            "-5 * * * *",
            "1-2-3 * * * *",
            "*/0 * * * *",
            "*/ * * * *",
            "1,,2 * * * *",
            "1, * * * *",
            ",1 * * * *",
            "*-5 * * * *",
            "5/2 * * * *",
            "0x5 * * * *",
            "0 0 * * Sunday",
            "0 0 * Mon * *",
            "0 0 * * Jan",
            "Mon * * * *",
            "0 0 * *",
            "0 0 * * * *",
            "@daily 0",
            "@fortnightly",
        ] {
            assert!(parse(expression).is_err(), "cronie accepts {expression:?}");
            assert!(
                parse_as_cronlease(expression).is_err(),
                "the model of cronlease accepts {expression:?}"
            );
        }
    }

    #[test]
    fn names_numbers_and_sundays() {
        let schedule = parse("007 01 1 1-Jan sun,MON-fri").expect("valid");
        assert_eq!(schedule.minutes, bits(&[7]));
        assert_eq!(schedule.hours, bits(&[1]));
        assert!(parse("0 0 * JAN-mar Sat-Sun").is_ok_and(|s| s.days_of_week == bits(&[0, 6, 7])));
        let schedule = parse("0 0 * JAN-mar 7").expect("valid");
        assert_eq!(schedule.months, bits(&[1, 2, 3]));
        assert_eq!(schedule.days_of_week, bits(&[0, 7]));
        assert!(parse("4294967301 * * * *").is_ok_and(|s| s.minutes == bits(&[5])));
        assert!(parse_as_cronlease("4294967301 * * * *").is_err());
    }

    #[test]
    fn macros_set_the_flags_load_entry_sets() {
        let hourly = parse("@hourly").expect("valid");
        assert!(!hourly.is_fixed_time());
        assert!(parse("@daily").expect("valid").is_fixed_time());
        let weekly = parse("@weekly").expect("valid");
        assert!(weekly.day_of_month_star && !weekly.day_of_week_star);
        let yearly = parse("@annually").expect("valid");
        assert_eq!((yearly.months, yearly.days_of_month), (2, 2));
        assert!(parse("@DAILY").is_err());
        let daily = parse_as_cronlease("@DAILY").expect("any case");
        assert_eq!(daily.differs_from_cronie, Some(Deviation::Macro));
        assert!(parse("@reboot").is_ok());
        let reboot = parse_as_cronlease("@reboot").expect_err("not a time");
        assert_eq!(reboot.deviation, Some(Deviation::Macro));
    }

    #[test]
    fn random_values_and_dates_that_never_come() {
        assert!(parse("~ * * * *").is_ok());
        assert!(parse("5~10 * * * *").is_ok_and(|s| s.minutes == bits(&[5])));
        assert!(parse("10~5 * * * *").is_err());
        let refused = parse_as_cronlease("5~10 * * * *").expect_err("random");
        assert_eq!(refused.deviation, Some(Deviation::RandomValue));
        for never in ["0 0 30 2 *", "0 0 31 4,6,9,11 *", "0 0 0 29 2 * 2027"] {
            assert!(parse(never).is_ok(), "cronie loads {never:?}");
            let refused = parse_as_cronlease(never).expect_err("never");
            assert_eq!(
                refused.deviation,
                Some(Deviation::MatchesNoDate),
                "{never:?}"
            );
        }
        assert!(parse_as_cronlease("0 0 0 29 2 * 2027-2028").is_ok());
        assert!(
            parse_as_cronlease("0 0 30 2 Mon").is_ok(),
            "OR: every Monday"
        );
        assert!(
            parse_as_cronlease("0 0 30 2 */1").is_err(),
            "AND: no Feb 30"
        );
    }

    #[test]
    fn extensions_are_recognised_by_whole_items() {
        for (expression, expected) in [
            ("5/15 * * * *", Some("N/step")),
            ("0 0 ? * 1", Some("? in a day field")),
            ("0 0 L * *", Some("Quartz L/W in day-of-month")),
            ("0 0 15W * *", Some("Quartz L/W in day-of-month")),
            ("0 0 * * 5L", Some("Quartz L/# in day-of-week")),
            ("0 0 * * FRI#3", Some("Quartz L/# in day-of-week")),
            ("H(0-29) * * * *", Some("Jenkins H")),
            ("*/5 * * * * *", Some("6 fields with leading seconds")),
            ("0 0 * JUL WED", None),
            ("5/ * * * *", None),
        ] {
            assert_eq!(cronlease_extension(expression), expected, "{expression:?}");
        }
    }

    /// `fires` without its shortcuts: the zone's offset looked up at every
    /// minute and every minute a turn of the loop.
    fn fires_minute_by_minute(
        schedule: &RefSchedule,
        zone: Tz,
        policy: DstPolicy,
        from_utc: DateTime<Utc>,
        to_utc: DateTime<Utc>,
    ) -> Vec<DateTime<Utc>> {
        let first_reported = from_utc.timestamp().div_euclid(60) + 1;
        let last_reported = to_utc.timestamp().div_euclid(60);
        let start = first_reported - WARM_UP_MINUTES;
        let start_wall = wall_minute(start, offset_seconds(zone, start));
        let mut daemon = Daemon {
            time_running: start_wall,
            virtual_time: start_wall,
        };
        let mut fired = Vec::new();
        for real_minute in start + 1..=last_reported {
            let wall = wall_minute(real_minute, offset_seconds(zone, real_minute));
            let starts = daemon.wake(schedule, policy, wall);
            if real_minute >= first_reported && starts > 0 {
                fired.push(DateTime::<Utc>::from_timestamp(real_minute * 60, 0).expect("valid"));
            }
        }
        fired
    }

    #[test]
    fn the_shortcuts_change_nothing() {
        let instant = |text: &str| {
            DateTime::parse_from_rfc3339(text)
                .expect("RFC 3339")
                .with_timezone(&Utc)
        };
        let starts = [
            ("America/New_York", "2026-03-07T05:00:00Z"),
            ("America/New_York", "2026-10-31T04:13:30Z"),
            ("Australia/Lord_Howe", "2027-04-02T10:00:00Z"),
            ("Pacific/Chatham", "2026-09-25T13:00:00Z"),
            ("America/Sao_Paulo", "2018-11-03T00:00:00Z"),
            ("America/St_Johns", "2010-11-06T00:00:00Z"),
        ];
        let expressions = [
            "*/7 * * * *",
            "30 1-2 * * *",
            "0,15,30,45 0-3 * * *",
            "59 23 * * *",
            "0 0 * * *",
            "*/20 0-3 * * 0",
            "45 2 */2 * 1-5",
            "@hourly",
        ];
        let policies = [
            DstPolicy::default(),
            DstPolicy {
                gap: DstGap::Skip,
                repeat: DstRepeat::Both,
            },
        ];
        for (zone_name, from) in starts {
            let zone: Tz = zone_name.parse().expect("known zone");
            let from = instant(from);
            let to = from + chrono::Duration::days(3);
            for expression in expressions {
                let schedule = parse(expression).expect("valid");
                for policy in policies {
                    assert_eq!(
                        fires(&schedule, zone, policy, from, to),
                        fires_minute_by_minute(&schedule, zone, policy, from, to),
                        "{expression:?} in {zone_name} from {from} with {policy:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn the_calendar_agrees_with_chrono() {
        use chrono::Datelike;
        for day in (-800_000..3_000_000).step_by(997) {
            let date = CivilDate::of_day(day);
            let expected = DateTime::<Utc>::from_timestamp(day * 86_400, 0)
                .expect("in range")
                .date_naive();
            assert_eq!(
                (date.year, date.month, date.day, date.weekday),
                (
                    i64::from(expected.year()),
                    expected.month(),
                    expected.day(),
                    expected.weekday().num_days_from_sunday()
                )
            );
            assert_eq!(
                days_from_civil(date.year, i64::from(date.month), i64::from(date.day)),
                day
            );
        }
    }
}
