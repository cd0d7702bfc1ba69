//! A schedule in plain words ("at 02:30 on Monday to Friday"), for the
//! dashboard to print beside the expression.
//!
//! The reading is built from the parsed sets ([`Expr`]), never from the
//! text, so `H` reads as the values it picked and a macro as what it
//! expands to. Truth comes before elegance: a common shape (a few clock
//! times, a step that divides the hour, a weekday range) gets its idiom;
//! anything else reads each field's set back, with runs written as ranges
//! and a whole set written as a step only when the step is exact. Times are
//! local to the job's zone, which the reading does not name.

use super::Schedule;
use super::expr::{DayRule, Expr, MONTH_FULL_NAMES};
use super::sets::{Bits, DaysOfMonth, DaysOfWeek, LastDay, Years, bit};

impl Schedule {
    /// The schedule in plain English, built from the parsed fields, for
    /// a reader who does not know cron:
    ///
    /// | expression     | reading                                       |
    /// |----------------|-----------------------------------------------|
    /// | `0 12 * * *`   | at 12:00 every day                            |
    /// | `*/15 * * * *` | every 15 minutes                              |
    /// | `30 2 * * 1-5` | at 02:30 on Monday to Friday                  |
    /// | `0 0 1 * 1`    | at 00:00 on day 1 of the month or on Monday   |
    /// | `0 0 * * 2#2`  | at 00:00 on the second Tuesday of the month   |
    ///
    /// (`0 0 1 * 1` fires on either day: cronie's rule when both day fields
    /// are restricted.) `H` reads as the values it picked for this job.
    /// Times are in the schedule's zone, which the text leaves out. Never
    /// empty, and never claims a tick the expression does not have.
    #[cfg_attr(
        not(feature = "dashboard"),
        allow(dead_code, reason = "read by the dashboard only")
    )]
    pub fn describe(&self) -> String {
        describe(&self.expr)
    }
}

/// The reading of a parsed expression: the times of day, then the days, the
/// months and the years, each left out when its field allows everything.
pub(super) fn describe(expr: &Expr) -> String {
    let time = times(expr.seconds, expr.minutes, expr.hours);
    let calendar = calendar(expr);
    let mut words = Vec::new();
    match calendar.days {
        Some(days) => words.push(days),
        None if time.daily => words.push("every day".to_string()),
        None => {}
    }
    words.extend(calendar.months);
    words.extend(years(&expr.years));
    let comma = if time.open_clause && !words.is_empty() {
        ","
    } else {
        ""
    };
    words.insert(0, format!("{}{comma}", time.text));
    words.join(" ")
}

/// The times of day a schedule fires at.
struct Times {
    text: String,
    /// Whether the text pins times within a day, so that a schedule with
    /// no day restriction reads better with "every day" after it.
    daily: bool,
    /// Whether the text ends in a clause ("…, starting at 5 minutes past
    /// the hour") that needs a comma before the days are named.
    open_clause: bool,
}

/// The most clock times listed one by one ("at 09:00 and 17:00").
const MAX_CLOCK_TIMES: usize = 6;

// Long by design: the idioms are tried in order and the first that fits wins; one function keeps
// that order visible.
/// The times of day from the second, minute and hour sets.
fn times(seconds: Bits, minutes: Bits, hours: Bits) -> Times {
    let seconds = values(seconds, 0, 59);
    let minutes = values(minutes, 0, 59);
    let hours = values(hours, 0, 23);
    let all_seconds = seconds.len() == 60;
    let all_minutes = minutes.len() == 60;
    let all_hours = hours.len() == 24;
    if seconds.is_empty() || minutes.is_empty() || hours.is_empty() {
        // The parser gives every field a value; this keeps the indexing
        // below safe should that ever change.
        return Times {
            text: "never".to_string(),
            daily: false,
            open_clause: false,
        };
    }
    let on_the_minute = seconds == [0];
    let precision = if on_the_minute {
        Precision::Minutes
    } else {
        Precision::Seconds
    };
    let count = seconds.len() * minutes.len() * hours.len();

    // One moment of the hour in evenly spaced hours: "every hour from
    // 09:00 to 17:00", "every 2 hours from 00:00 to 22:00".
    let one_moment = seconds.len() == 1 && minutes.len() == 1;
    let hour_step = match runs(&hours)[..] {
        [(first, last)] if last > first + 1 => Some(1),
        _ if hours.len() >= 4 => progression(&hours).map(|(_, step, _)| step),
        _ => None,
    };
    if let (true, Some(step), false) = (one_moment, hour_step, all_hours) {
        let at = |hour| clock(hour, minutes[0], seconds[0], precision);
        let every = if step == 1 {
            "every hour".to_string()
        } else {
            format!("every {step} hours")
        };
        return Times {
            text: format!(
                "{every} from {} to {}",
                at(hours[0]),
                at(hours[hours.len() - 1])
            ),
            daily: even_step(&hours, 24).is_none(),
            open_clause: false,
        };
    }
    // A few clock times: "at 09:00 and 17:00".
    if !all_seconds && !all_minutes && !all_hours && count <= MAX_CLOCK_TIMES {
        let mut clock_times = Vec::with_capacity(count);
        for &hour in &hours {
            for &minute in &minutes {
                for &second in &seconds {
                    clock_times.push(clock(hour, minute, second, precision));
                }
            }
        }
        return Times {
            text: format!("at {}", join(&clock_times)),
            daily: true,
            open_clause: false,
        };
    }
    if on_the_minute && minutes.len() == 1 {
        let minute = minutes[0];
        if all_hours {
            let text = if minute == 0 {
                "at the start of every hour".to_string()
            } else {
                format!("at {} past every hour", amount(minute, "minute"))
            };
            return Times {
                text,
                daily: false,
                open_clause: false,
            };
        }
    }

    // Within the hour: a cadence that fills it evenly, or pinned offsets.
    let within = within_hour(&seconds, &minutes);
    let mut open_clause = false;
    let text = match within {
        WithinHour::Cadence { every, offset } => {
            if all_hours {
                match offset {
                    Some(offset) => {
                        open_clause = true;
                        format!("{every}, {offset}")
                    }
                    None => every,
                }
            } else if let [(first, last)] = runs(&hours)[..] {
                // Every tick between the first and the last of the window.
                format!(
                    "{every} from {} to {}",
                    clock(first, minutes[0], seconds[0], precision),
                    clock(
                        last,
                        minutes[minutes.len() - 1],
                        seconds[seconds.len() - 1],
                        precision
                    )
                )
            } else {
                let every = match offset {
                    Some(offset) => format!("{every}, {offset},"),
                    None => every,
                };
                format!("{every} during {}", field_noun(&hours, "hour", 24))
            }
        }
        WithinHour::Pinned {
            text,
            link,
            every_minute,
        } => {
            if all_hours && every_minute {
                text
            } else {
                format!("{text} {link} {}", field_noun(&hours, "hour", 24))
            }
        }
    };
    Times {
        text,
        daily: !all_hours,
        open_clause,
    }
}

/// What happens within one hour.
enum WithinHour {
    /// Ticks at a fixed interval that fills the hour: "every 15 minutes",
    /// with an offset when they do not start at the hour's start.
    Cadence {
        every: String,
        offset: Option<String>,
    },
    /// Ticks at given offsets, read with the hours after `link`: "at
    /// minutes 3 and 17" past hours 1 to 5.
    Pinned {
        text: String,
        link: &'static str,
        /// The text ends in "past every minute", which says enough when
        /// every hour is allowed.
        every_minute: bool,
    },
}

/// How the hour is filled by `seconds` and `minutes` (each ascending,
/// none empty).
fn within_hour(seconds: &[u32], minutes: &[u32]) -> WithinHour {
    let all_seconds = seconds.len() == 60;
    let all_minutes = minutes.len() == 60;
    let on_the_minute = seconds == [0];
    if on_the_minute {
        if all_minutes {
            return WithinHour::Cadence {
                every: "every minute".to_string(),
                offset: None,
            };
        }
        if let Some((start, step)) = even_step(minutes, 60) {
            return WithinHour::Cadence {
                every: format!("every {step} minutes"),
                offset: (start != 0)
                    .then(|| format!("starting at {} past the hour", amount(start, "minute"))),
            };
        }
        return WithinHour::Pinned {
            text: format!("at {}", offsets(minutes, "minute", 60)),
            link: "past",
            every_minute: false,
        };
    }
    // Seconds matter: they lead, the minutes follow.
    let cadence = if all_seconds {
        Some(("every second".to_string(), None))
    } else {
        even_step(seconds, 60).map(|(start, step)| {
            (
                format!("every {step} seconds"),
                (start != 0)
                    .then(|| format!("starting at {} past the minute", amount(start, "second"))),
            )
        })
    };
    match cadence {
        Some((every, offset)) if all_minutes => WithinHour::Cadence { every, offset },
        Some((every, offset)) => {
            let every = match offset {
                Some(offset) => format!("{every}, {offset},"),
                None => every,
            };
            WithinHour::Pinned {
                text: format!("{every} during {}", field_noun(minutes, "minute", 60)),
                link: "of",
                every_minute: false,
            }
        }
        None => {
            let minutes = if all_minutes {
                "every minute".to_string()
            } else {
                field_noun(minutes, "minute", 60)
            };
            WithinHour::Pinned {
                text: format!("at {} past {minutes}", offsets(seconds, "second", 60)),
                link: "of",
                every_minute: all_minutes,
            }
        }
    }
}

/// The days and months, read together where one phrase says both
/// ("on 1 January").
struct Calendar {
    days: Option<String>,
    months: Option<String>,
}

fn calendar(expr: &Expr) -> Calendar {
    let months = values(expr.months, 1, 12);
    let all_days = expr.days.days == span(1, 31);
    let all_weekdays = expr.weekdays.weekdays & span(0, 6) == span(0, 6);
    let month_days = values(expr.days.days, 1, 31);
    let plain_day = expr.days.last.is_none() && expr.days.nearest_weekday == 0;
    if expr.day_rule == DayRule::Both
        && all_weekdays
        && plain_day
        && let ([day], [month]) = (&month_days[..], &months[..])
    {
        return Calendar {
            days: Some(format!(
                "on {day} {}",
                MONTH_FULL_NAMES[(*month - 1) as usize]
            )),
            months: None,
        };
    }
    let days = match (expr.day_rule, all_days, all_weekdays) {
        (_, true, true) | (DayRule::Either, true, _) | (DayRule::Either, _, true) => None,
        (DayRule::Both, false, true) => Some(format!("on {}", days_of_month(&expr.days))),
        (DayRule::Both, true, false) => Some(format!("on {}", days_of_week(&expr.weekdays, "and"))),
        (DayRule::Both, false, false) => Some(format!(
            "on {}, if it falls on {}",
            days_of_month(&expr.days),
            days_of_week(&expr.weekdays, "or")
        )),
        (DayRule::Either, false, false) => Some(format!(
            "on {} or on {}",
            days_of_month(&expr.days),
            days_of_week(&expr.weekdays, "and")
        )),
    };
    let months = (months.len() < 12).then(|| {
        let names = pieces(&months, |month| {
            MONTH_FULL_NAMES[(month - 1) as usize].to_string()
        });
        format!("in {}", join(&names))
    });
    Calendar { days, months }
}

/// The day-of-month field: "day 1 and the last day of the month".
fn days_of_month(days: &DaysOfMonth) -> String {
    let mut items = Vec::new();
    let plain = values(days.days, 1, 31);
    if !plain.is_empty() {
        items.push(match progression(&plain) {
            Some((first, step, last)) => {
                format!("every {} day from day {first} to {last}", ordinal(step))
            }
            None if plain.len() == 1 => format!("day {}", plain[0]),
            None => format!("days {}", join(&pieces(&plain, |day| day.to_string()))),
        });
    }
    match days.last {
        Some(LastDay::Day) => items.push("the last day".to_string()),
        Some(LastDay::Weekday) => items.push("the last weekday".to_string()),
        None => {}
    }
    for day in values(days.nearest_weekday, 1, 31) {
        items.push(format!("the weekday nearest day {day}"));
    }
    format!("{} of the month", join(&items))
}

/// The day-of-week field: "Monday to Friday", "the second Tuesday of the
/// month", its items joined by `conjunction` ("Monday or Friday" when the
/// day must be one of them).
fn days_of_week(weekdays: &DaysOfWeek, conjunction: &str) -> String {
    let mut items = Vec::new();
    // Monday first: 0 is Monday, 6 Sunday.
    let mut plain: Vec<u32> = values(weekdays.weekdays, 0, 6)
        .into_iter()
        .map(|day| (day + 6) % 7)
        .collect();
    plain.sort_unstable();
    items.extend(pieces(&plain, |day| {
        WEEKDAYS[((day + 1) % 7) as usize].to_string()
    }));
    let mut of_the_month = false;
    for index in values(weekdays.nth, 0, 34) {
        let (nth, day) = (index / 7, index % 7);
        items.push(format!(
            "the {} {}",
            NTH[nth as usize], WEEKDAYS[day as usize]
        ));
        of_the_month = true;
    }
    for day in values(weekdays.last, 0, 6) {
        items.push(format!("the last {}", WEEKDAYS[day as usize]));
        of_the_month = true;
    }
    let list = join_with(&items, conjunction);
    if of_the_month {
        format!("{list} of the month")
    } else {
        list
    }
}

/// The year field: "in 2027", "in 2027 to 2030".
fn years(years: &Years) -> Option<String> {
    let mut ranges = years.0.clone()?;
    ranges.sort_unstable();
    ranges.dedup();
    let items: Vec<String> = ranges
        .into_iter()
        .map(|(first, last, step)| {
            let last = first + (last - first) / step * step;
            if first == last {
                first.to_string()
            } else if step == 1 {
                format!("{first} to {last}")
            } else {
                format!("every {} year from {first} to {last}", ordinal(step))
            }
        })
        .collect();
    (!items.is_empty()).then(|| format!("in {}", join(&items)))
}

/// A field's values as a noun phrase: "hour 3", "hours 1 to 5 and 9",
/// "every 7th minute from 0 to 56", "every hour".
fn field_noun(values: &[u32], noun: &str, size: u32) -> String {
    if values.len() == size as usize {
        return format!("every {noun}");
    }
    if let Some((first, step, last)) = progression(values) {
        return format!("every {} {noun} from {first} to {last}", ordinal(step));
    }
    match values {
        [value] => format!("{noun} {value}"),
        _ => format!("{noun}s {}", join(&pieces(values, |v| v.to_string()))),
    }
}

/// Offsets into a minute or hour: "15 minutes" for one, else as
/// [`field_noun`].
fn offsets(values: &[u32], unit: &str, size: u32) -> String {
    match values {
        [value] if *value != 0 => amount(*value, unit),
        _ => field_noun(values, unit, size),
    }
}

/// "1 minute", "15 minutes".
fn amount(value: u32, unit: &str) -> String {
    if value == 1 {
        format!("1 {unit}")
    } else {
        format!("{value} {unit}s")
    }
}

/// Whether clock times show their seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Precision {
    /// `09:30`: every time is on the minute.
    Minutes,
    /// `09:30:15`.
    Seconds,
}

/// `hour:minute`, with `:second` at [`Precision::Seconds`].
fn clock(hour: u32, minute: u32, second: u32, precision: Precision) -> String {
    match precision {
        Precision::Seconds => format!("{hour:02}:{minute:02}:{second:02}"),
        Precision::Minutes => format!("{hour:02}:{minute:02}"),
    }
}

/// The values of a set within `low..=high`, ascending.
fn values(set: Bits, low: u32, high: u32) -> Vec<u32> {
    (low..=high)
        .filter(|&value| set & bit(value) != 0)
        .collect()
}

/// The set of `low..=high`.
fn span(low: u32, high: u32) -> Bits {
    (low..=high).fold(0, |set, value| set | bit(value))
}

/// `(start, step)` when `values` are every `step`-th value of a field of
/// `size` values from `start`, with the step dividing the field and `start`
/// below it: a cadence that continues evenly into the next hour or day.
fn even_step(values: &[u32], size: u32) -> Option<(u32, u32)> {
    let (&start, rest) = values.split_first()?;
    let step = *rest.first()? - start;
    let even = step >= 2
        && size.is_multiple_of(step)
        && start < step
        && values.len() as u32 == size / step
        && values.windows(2).all(|pair| pair[1] - pair[0] == step);
    even.then_some((start, step))
}

/// `(first, step, last)` when `values` (at least four) are evenly spaced
/// by a step of 2 or more.
fn progression(values: &[u32]) -> Option<(u32, u32, u32)> {
    if values.len() < 4 {
        return None;
    }
    let step = values[1] - values[0];
    let even = step >= 2 && values.windows(2).all(|pair| pair[1] - pair[0] == step);
    even.then(|| (values[0], step, values[values.len() - 1]))
}

/// Ascending values as runs of consecutive values.
fn runs(values: &[u32]) -> Vec<(u32, u32)> {
    let mut runs: Vec<(u32, u32)> = Vec::new();
    for &value in values {
        match runs.last_mut() {
            Some((_, last)) if *last + 1 == value => *last = value,
            _ => runs.push((value, value)),
        }
    }
    runs
}

/// Ascending values as list items: a run of three or more as "first to
/// last", shorter ones value by value.
fn pieces(values: &[u32], name: impl Fn(u32) -> String) -> Vec<String> {
    let mut items = Vec::new();
    for (first, last) in runs(values) {
        if last >= first + 2 {
            items.push(format!("{} to {}", name(first), name(last)));
        } else {
            items.extend((first..=last).map(&name));
        }
    }
    items
}

/// "a", "a and b", "a, b and c".
fn join(items: &[String]) -> String {
    join_with(items, "and")
}

/// "a", "a or b", "a, b or c" for the conjunction "or".
fn join_with(items: &[String], conjunction: &str) -> String {
    match items {
        [] => String::new(),
        [only] => only.clone(),
        [rest @ .., last] => format!("{} {conjunction} {last}", rest.join(", ")),
    }
}

/// "2nd", "3rd", "11th", "21st".
fn ordinal(n: u32) -> String {
    let suffix = match (n % 10, n % 100) {
        (_, 11..=13) => "th",
        (1, _) => "st",
        (2, _) => "nd",
        (3, _) => "rd",
        _ => "th",
    };
    format!("{n}{suffix}")
}

/// Sunday first, as the day-of-week field counts.
const WEEKDAYS: [&str; 7] = [
    "Sunday",
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
];

/// `d#n` for n = 1 to 5.
const NTH: [&str; 5] = ["first", "second", "third", "fourth", "fifth"];

#[cfg(test)]
mod tests;
