//! Reading a cron expression: the text of each field turned into the set of
//! values it allows.
//!
//! The grammar is cronie's (`entry.c`: `get_list`, `get_range`,
//! `get_number`), with the day-field rule and the fixed-time/wall-clock split
//! it derives from which fields start with `*`. Where cronie accepts nonsense
//! silently (a reversed range such as `22-2` sets nothing; `0-70/100` passes
//! because the step skips 70) this module refuses with a message instead.
//! Extensions beyond cronie, each documented in the guide ("Schedules"): leading seconds
//! and a trailing year, `N/step`, `?`, Quartz's `L`, `W` and `#`, and
//! Jenkins' hashed `H`. cronie's `~` (a random value at load) is refused: it
//! would differ from replica to replica.

use std::fmt::Write as _;

use super::calendar::{days_in_month, weekday};
use super::sets::{Bits, DaysOfMonth, DaysOfWeek, FIRST_YEAR, LAST_YEAR, LastDay, Years, bit};

/// How a job meets daylight saving time, from cronie's rule: a job whose
/// minute and hour fields do not start with `*` runs at fixed times (and gets
/// the DST treatment); any other runs by the wall clock as it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Timing {
    /// Minute and hour are not `*`-led (`30 2 * * *`, `0 1,13 * * *`,
    /// `0 0-23/2 * * *`, `@daily`): a time in a gap runs after it, a
    /// repeated time runs once (see [`DstPolicy`](super::DstPolicy)).
    FixedTime,
    /// Minute or hour is `*`-led (`*/15 * * * *`, `30 * * * *`, `@hourly`):
    /// skipped local times do not run, repeated ones run again.
    WallClock,
}

impl Timing {
    /// The name `check --json` uses.
    pub fn as_str(self) -> &'static str {
        match self {
            Timing::FixedTime => "fixed_time",
            Timing::WallClock => "wall_clock",
        }
    }
}

/// The macros a schedule may be instead of fields, with their meaning. The
/// expansions carry cronie's flags through the ordinary rules: `@hourly` is
/// star-led in the hour (wall clock), `@yearly`'s `*` weekday makes the day
/// rule "both".
const MACROS: &[(&str, &str)] = &[
    ("@yearly", "0 0 1 1 *"),
    ("@annually", "0 0 1 1 *"),
    ("@monthly", "0 0 1 * *"),
    ("@weekly", "0 0 * * 0"),
    ("@daily", "0 0 * * *"),
    ("@midnight", "0 0 * * *"),
    ("@hourly", "0 * * * *"),
];

/// What a valid expression looks like, appended to shape errors.
pub(super) const EXPECTED_FORM: &str = "expected 5 fields (minute hour day-of-month month day-of-week), \
     6 with leading seconds, 7 with a trailing year, or one of @yearly @monthly @weekly @daily @hourly";

/// The highest day of the month a hashed `H` picks, so that it exists in
/// every month (as in Jenkins).
const HASHED_LAST_DAY: u32 = 28;

const MONTH_NAMES: [&str; 12] = [
    "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
];
const WEEKDAY_NAMES: [&str; 7] = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"];

/// Every field in the order of a 7-field expression; 6 fields drop the
/// year, 5 also the second.
const ALL_FIELDS: [Field; 7] = [
    Field::Second,
    Field::Minute,
    Field::Hour,
    Field::DayOfMonth,
    Field::Month,
    Field::DayOfWeek,
    Field::Year,
];

/// One field of the expression.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field {
    Second,
    Minute,
    Hour,
    DayOfMonth,
    Month,
    DayOfWeek,
    Year,
}

impl Field {
    fn name(self) -> &'static str {
        match self {
            Field::Second => "second",
            Field::Minute => "minute",
            Field::Hour => "hour",
            Field::DayOfMonth => "day-of-month",
            Field::Month => "month",
            Field::DayOfWeek => "day-of-week",
            Field::Year => "year",
        }
    }

    /// The values the field may name (7 is Sunday, as 0 is).
    fn range(self) -> (u32, u32) {
        match self {
            Field::Second | Field::Minute => (0, 59),
            Field::Hour => (0, 23),
            Field::DayOfMonth => (1, 31),
            Field::Month => (1, 12),
            Field::DayOfWeek => (0, 7),
            Field::Year => (FIRST_YEAR, LAST_YEAR),
        }
    }

    fn names(self) -> Option<&'static [&'static str]> {
        match self {
            Field::Month => Some(&MONTH_NAMES),
            Field::DayOfWeek => Some(&WEEKDAY_NAMES),
            _ => None,
        }
    }

    /// The value of the first name (`jan` is 1, `sun` is 0).
    fn first_name_value(self) -> u32 {
        match self {
            Field::Month => 1,
            _ => 0,
        }
    }
}

/// How the day-of-month and day-of-week fields combine (cronie's
/// `find_jobs`): when either starts with `*`, a day must match both; when
/// both are restricted, either one is enough (crontab(5)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum DayRule {
    Both,
    Either,
}

/// A parsed expression: the set of each field, and the two rules cronie
/// derives from which fields start with `*`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Expr {
    pub(super) seconds: Bits,
    pub(super) minutes: Bits,
    pub(super) hours: Bits,
    pub(super) days: DaysOfMonth,
    /// Bit n for month n (1-12).
    pub(super) months: Bits,
    pub(super) weekdays: DaysOfWeek,
    pub(super) years: Years,
    pub(super) day_rule: DayRule,
    pub(super) timing: Timing,
    /// The expression with every `H` replaced by what it picked: what
    /// `check` shows, and itself an expression with the same ticks.
    pub(super) resolved: String,
}

impl Expr {
    /// The day rule on one date of a month the other fields allow.
    pub(super) fn day_matches(&self, year: u32, month: u32, day: u32) -> bool {
        let month_length = days_in_month(year, month);
        let weekday = weekday(year, month, day);
        let by_day = self.days.matches(day, weekday, month_length);
        let by_weekday = self.weekdays.matches(day, weekday, month_length);
        match self.day_rule {
            DayRule::Both => by_day && by_weekday,
            DayRule::Either => by_day || by_weekday,
        }
    }
}

/// Parses `expression` for the job `job`: `H` is hashed from the job's name
/// so every replica picks the same values. Errors are the text after
/// "invalid cron expression …".
pub(super) fn parse(expression: &str, job: &str) -> Result<Expr, String> {
    let fields_text = expand_macro(expression)?;
    let parts: Vec<&str> = fields_text.split_whitespace().collect();
    let layout: &[Field] = match parts.len() {
        5 => &ALL_FIELDS[1..6],
        6 => &ALL_FIELDS[..6],
        7 => &ALL_FIELDS,
        n => {
            return Err(format!(
                "{n} field{} in {expression:?}: {EXPECTED_FORM}",
                if n == 1 { "" } else { "s" }
            ));
        }
    };
    let mut expr = Expr {
        seconds: bit(0),
        minutes: 0,
        hours: 0,
        days: DaysOfMonth::default(),
        months: 0,
        weekdays: DaysOfWeek::default(),
        years: Years(None),
        day_rule: DayRule::Either,
        timing: Timing::FixedTime,
        resolved: String::new(),
    };
    let mut star_led = Vec::with_capacity(parts.len());
    let mut resolved = Vec::with_capacity(parts.len());
    let seed = fnv1a(job.as_bytes());
    for (position, (&field, &text)) in layout.iter().zip(&parts).enumerate() {
        let parsed = parse_field(field, text, seed ^ (position as u64 + 1))
            .map_err(|e| format!("invalid cron expression {expression:?}: {e}"))?;
        star_led.push((field, text.starts_with(['*', '?'])));
        resolved.push(parsed.resolved);
        match parsed.values {
            Values::Bits(bits) => match field {
                Field::Second => expr.seconds = bits,
                Field::Minute => expr.minutes = bits,
                Field::Hour => expr.hours = bits,
                Field::Month => expr.months = bits,
                Field::DayOfMonth | Field::DayOfWeek | Field::Year => {
                    unreachable!("day and year fields parse into their own values")
                }
            },
            Values::Days(days) => expr.days = days,
            Values::Weekdays(weekdays) => expr.weekdays = weekdays,
            Values::Years(years) => expr.years = years,
        }
    }
    let is_star = |wanted: Field| {
        star_led
            .iter()
            .any(|&(field, star)| field == wanted && star)
    };
    expr.day_rule = if is_star(Field::DayOfMonth) || is_star(Field::DayOfWeek) {
        DayRule::Both
    } else {
        DayRule::Either
    };
    expr.timing = if is_star(Field::Minute) || is_star(Field::Hour) {
        Timing::WallClock
    } else {
        Timing::FixedTime
    };
    expr.resolved = if expression.trim_start().starts_with('@') {
        expression.trim().to_string()
    } else {
        resolved.join(" ")
    };
    Ok(expr)
}

/// A macro's fields, or the expression itself.
fn expand_macro(expression: &str) -> Result<String, String> {
    let trimmed = expression.trim();
    let Some(name) = trimmed.strip_prefix('@') else {
        return Ok(trimmed.to_string());
    };
    let lowered = trimmed.to_ascii_lowercase();
    match MACROS.iter().find(|(m, _)| *m == lowered) {
        Some((_, fields)) => Ok((*fields).to_string()),
        None if name.eq_ignore_ascii_case("reboot") => Err(
            "@reboot is not supported: cronlease runs ticks of a calendar, not process starts; \
             use a systemd unit for that"
                .to_string(),
        ),
        None => Err(format!("unknown macro {trimmed:?}: {EXPECTED_FORM}")),
    }
}

/// What one field allows.
enum Values {
    Bits(Bits),
    Days(DaysOfMonth),
    Weekdays(DaysOfWeek),
    Years(Years),
}

struct ParsedField {
    values: Values,
    resolved: String,
}

/// Parses one field: a comma-separated list of items.
fn parse_field(field: Field, text: &str, seed: u64) -> Result<ParsedField, String> {
    let name = field.name();
    let (low, high) = field.range();
    let mut bits: Bits = 0;
    let mut days = DaysOfMonth::default();
    let mut weekdays = DaysOfWeek::default();
    let mut years: Vec<(u32, u32, u32)> = Vec::new();
    let mut any_year = false;
    let mut resolved_items = Vec::new();
    for (index, item) in text.split(',').enumerate() {
        if item.is_empty() {
            return Err(format!(
                "{name} field {text:?} has an empty list item: expected values separated by single commas, such as 1,15"
            ));
        }
        let item_seed = seed.wrapping_mul(0x100_0000_01b3) ^ (index as u64);
        let parsed = parse_item(field, item, item_seed)?;
        resolved_items.push(parsed.resolved.unwrap_or_else(|| item.to_string()));
        match parsed.item {
            Item::Range { first, last, step } => {
                if field == Field::Year {
                    if first == low && last == high && step == 1 {
                        any_year = true;
                    }
                    years.push((first, last, step));
                } else {
                    let mut value = first;
                    while value <= last {
                        // 7 is Sunday, as 0 is.
                        let value_bit = if field == Field::DayOfWeek && value == 7 {
                            0
                        } else {
                            value
                        };
                        bits |= bit(value_bit);
                        value += step;
                    }
                }
            }
            Item::LastDay(last) => days.last = Some(last),
            Item::NearestWeekday(day) => days.nearest_weekday |= bit(day),
            Item::NthWeekday { weekday, nth } => weekdays.nth |= bit((nth - 1) * 7 + weekday % 7),
            Item::LastWeekday(weekday) => weekdays.last |= bit(weekday % 7),
        }
    }
    let values = match field {
        Field::DayOfMonth => {
            days.days = bits;
            Values::Days(days)
        }
        Field::DayOfWeek => {
            weekdays.weekdays = bits;
            Values::Weekdays(weekdays)
        }
        Field::Year if any_year => Values::Years(Years(None)),
        Field::Year => Values::Years(Years(Some(years))),
        _ => Values::Bits(bits),
    };
    Ok(ParsedField {
        values,
        resolved: resolved_items.join(","),
    })
}

/// One item of a list.
enum Item {
    /// `first-last/step`; `*`, a single value and `N/step` are ranges too.
    Range { first: u32, last: u32, step: u32 },
    /// `L` or `LW` in the day of the month.
    LastDay(LastDay),
    /// `nW` in the day of the month.
    NearestWeekday(u32),
    /// `d#n` in the day of the week.
    NthWeekday { weekday: u32, nth: u32 },
    /// `dL` in the day of the week.
    LastWeekday(u32),
}

struct ParsedItem {
    item: Item,
    /// The item as `check` shows it when it was hashed (`H`).
    resolved: Option<String>,
}

impl From<Item> for ParsedItem {
    fn from(item: Item) -> Self {
        ParsedItem {
            item,
            resolved: None,
        }
    }
}

/// Parses one item of a list: `*` (or `?` in a day field), `H` and its
/// forms, Quartz's day extensions, or a value, range or `N/step`, each with
/// an optional `/step`.
fn parse_item(field: Field, item: &str, seed: u64) -> Result<ParsedItem, String> {
    if item.contains('~') {
        let name = field.name();
        return Err(format!(
            "{name} item {item:?}: `~` picks a random value when the table is loaded, which \
             would differ from replica to replica; use H (hashed from the job's name, the same \
             on every replica), e.g. H or H(0-29)"
        ));
    }
    let (base, step) = split_step(field, item)?;
    if base == "*" || (base == "?" && matches!(field, Field::DayOfMonth | Field::DayOfWeek)) {
        let (low, high) = field.range();
        return Ok(Item::Range {
            first: low,
            last: high,
            step: step.unwrap_or(1),
        }
        .into());
    }
    if base == "H" || base.starts_with("H(") {
        return parse_hashed(field, item, base, step, seed);
    }
    // Quartz extensions, before the plain forms.
    if step.is_none()
        && let Some(extension) = parse_quartz(field, item, base)?
    {
        return Ok(extension.into());
    }
    let (first, last) = parse_range(field, item, base, step)?;
    Ok(Item::Range {
        first,
        last,
        step: step.unwrap_or(1),
    }
    .into())
}

/// The item without its `/step`, and the step (a number, not 0).
fn split_step(field: Field, item: &str) -> Result<(&str, Option<u32>), String> {
    let name = field.name();
    let Some((base, step_text)) = item.split_once('/') else {
        return Ok((item, None));
    };
    let step = parse_number(step_text)
        .ok_or_else(|| format!("{name} item {item:?}: the step after `/` must be a number"))?;
    if step == 0 {
        return Err(format!(
            "{name} item {item:?}: a step of 0 never advances: expected 1 or more"
        ));
    }
    Ok((base, Some(step)))
}

/// Quartz's forms of the day fields, if `base` is one: `L`, `LW` and `nW`
/// in the day of the month, `d#n` and `dL` in the day of the week.
fn parse_quartz(field: Field, item: &str, base: &str) -> Result<Option<Item>, String> {
    let name = field.name();
    if field == Field::DayOfMonth {
        let upper = base.to_ascii_uppercase();
        if upper == "L" {
            return Ok(Some(Item::LastDay(LastDay::Day)));
        }
        if upper == "LW" {
            return Ok(Some(Item::LastDay(LastDay::Weekday)));
        }
        if let Some(day) = upper.strip_suffix('W') {
            let day = value(field, day, item)?;
            return Ok(Some(Item::NearestWeekday(day)));
        }
    }
    if field == Field::DayOfWeek {
        if let Some((weekday, nth)) = base.split_once('#') {
            let weekday = value(field, weekday, item)?;
            let nth = parse_number(nth)
                .filter(|n| (1..=5).contains(n))
                .ok_or_else(|| format!("{name} item {item:?}: the number after `#` must be 1-5 (the n-th such weekday of the month)"))?;
            return Ok(Some(Item::NthWeekday { weekday, nth }));
        }
        if let Some(weekday) = base.strip_suffix(['L', 'l'])
            && !weekday.is_empty()
        {
            let weekday = value(field, weekday, item)?;
            return Ok(Some(Item::LastWeekday(weekday)));
        }
    }
    Ok(None)
}

/// The first and last value of a plain item: `a-b` (never backwards, but
/// cronie's `5-0` for Friday to Sunday), a single value, or `N/step`, which
/// runs from N to the field's end.
fn parse_range(
    field: Field,
    item: &str,
    base: &str,
    step: Option<u32>,
) -> Result<(u32, u32), String> {
    let name = field.name();
    let (low, high) = field.range();
    if let Some((first, last)) = base.split_once('-') {
        let first = value(field, first, item)?;
        let mut last = value(field, last, item)?;
        if field == Field::DayOfWeek && last == 0 && first > 0 {
            // cronie: `5-0` is Friday to Sunday.
            last = 7;
        }
        if first > last {
            return Err(format!(
                "{name} range {base:?} runs backwards: cron ranges do not wrap around; \
                 write it as two ranges, e.g. {first}-{high},{low}-{last}"
            ));
        }
        return Ok((first, last));
    }
    // `N/step` (Quartz, croner; not cronie) runs from N to the end.
    if base.is_empty() {
        return Err(shape_error(field, item));
    }
    let first = value(field, base, item).map_err(|e| {
        if base.chars().all(|c| c.is_ascii_alphanumeric()) {
            e
        } else {
            shape_error(field, item)
        }
    })?;
    Ok((first, if step.is_some() { high } else { first }))
}

/// The message for an item that has none of the shapes a field allows.
fn shape_error(field: Field, item: &str) -> String {
    let name = field.name();
    let (low, high) = field.range();
    let names = match field {
        Field::Month => ", names jan-dec",
        Field::DayOfWeek => ", names sun-sat",
        _ => "",
    };
    let extras = match field {
        Field::DayOfMonth => ", L, LW, nW, ?",
        Field::DayOfWeek => ", dL, d#n, ?",
        _ => "",
    };
    format!(
        "{name} item {item:?} is not valid: expected * or a number {low}-{high}{names}, a range a-b, \
         a step */n or a-b/n, a list a,b, or H{extras}"
    )
}

/// `H`, `H/n`, `H(a-b)`, `H(a-b)/n`: a value (or a start) picked by a hash
/// of the job's name, the field and the item's place.
fn parse_hashed(
    field: Field,
    item: &str,
    base: &str,
    step: Option<u32>,
    seed: u64,
) -> Result<ParsedItem, String> {
    let name = field.name();
    let (low, high) = field.range();
    let (first, last) = if base == "H" {
        if field == Field::Year {
            return Err(format!(
                "{name} item {item:?}: a bare H in the year field would pick any year \
                 {FIRST_YEAR}-{LAST_YEAR}; give a range, e.g. H(2027-2030)"
            ));
        }
        let last = if field == Field::DayOfMonth {
            HASHED_LAST_DAY
        } else if field == Field::DayOfWeek {
            6
        } else {
            high
        };
        (low, last)
    } else {
        let inner = base
            .strip_prefix("H(")
            .and_then(|rest| rest.strip_suffix(')'))
            .and_then(|range| range.split_once('-'))
            .ok_or_else(|| format!("{name} item {item:?}: expected H, H(a-b), H/n or H(a-b)/n"))?;
        let first = value(field, inner.0, item)?;
        let last = value(field, inner.1, item)?;
        if first > last {
            return Err(format!(
                "{name} range in {item:?} runs backwards: expected H(a-b) with a ≤ b"
            ));
        }
        (first, last)
    };
    let span = last - first + 1;
    let hash = mix(seed);
    match step {
        None => {
            let value = first + (hash % u64::from(span)) as u32;
            Ok(ParsedItem {
                item: Item::Range {
                    first: value,
                    last: value,
                    step: 1,
                },
                resolved: Some(value.to_string()),
            })
        }
        Some(step) => {
            let start = first + (hash % u64::from(step.min(span))) as u32;
            Ok(ParsedItem {
                item: Item::Range {
                    first: start,
                    last,
                    step,
                },
                resolved: Some(format!("{start}-{last}/{step}")),
            })
        }
    }
}

/// A value of `field`: a number in its range, or (month, weekday) a name.
fn value(field: Field, text: &str, item: &str) -> Result<u32, String> {
    let name = field.name();
    let (low, high) = field.range();
    if let Some(number) = parse_number(text) {
        if number < low || number > high {
            return Err(format!("{name} {number} is out of range {low}-{high}"));
        }
        return Ok(number);
    }
    if !text.is_empty() && text.bytes().all(|b| b.is_ascii_alphabetic()) {
        let Some(names) = field.names() else {
            return Err(format!(
                "{name} item {item:?}: names are allowed only for months (jan-dec) and weekdays (sun-sat); expected a number {low}-{high}"
            ));
        };
        let lowered = text.to_ascii_lowercase();
        return match names.iter().position(|n| *n == lowered) {
            Some(index) => Ok(field.first_name_value() + index as u32),
            None => Err(format!(
                "{name} item {item:?}: unknown name {text:?}: expected one of {}",
                names.join(" ")
            )),
        };
    }
    let mut message = format!("{name} item {item:?} is not valid: expected a number {low}-{high}");
    if let Some(names) = field.names() {
        let _ = write!(
            message,
            " or a name ({}-{})",
            names[0],
            names[names.len() - 1]
        );
    }
    message.push_str(", a range a-b, a step */n or a-b/n, or a list a,b");
    Err(message)
}

/// Decimal digits only (leading zeros allowed, as cronie's `strtol`).
fn parse_number(text: &str) -> Option<u32> {
    if text.is_empty() || text.len() > 9 || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

/// FNV-1a, 64 bit: a hash that never changes between versions or
/// platforms, so every replica (and every release) resolves `H` the same.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x100_0000_01b3)
    })
}

/// splitmix64's finaliser: spreads a seed's bits before taking a modulus.
fn mix(seed: u64) -> u64 {
    let mut z = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A hint for an expression that matches no date: the common case is a day
/// of the month that none of its months has (`0 0 30 2 *`).
pub(super) fn why_no_date(expr: &Expr) -> String {
    let days = &expr.days;
    if days.days == 0 || days.last.is_some() || days.nearest_weekday != 0 {
        return String::new();
    }
    let first_day = days.days.trailing_zeros();
    let months: Vec<u32> = (1..=12).filter(|&m| expr.months & bit(m) != 0).collect();
    // February's longest is 29 days.
    let longest = |month: u32| days_in_month(2000, month);
    if months.is_empty() || months.iter().any(|&m| longest(m) >= first_day) {
        return String::new();
    }
    let names: Vec<&str> = months
        .iter()
        .map(|&m| MONTH_FULL_NAMES[(m - 1) as usize])
        .collect();
    format!(
        " (day-of-month {first_day} never occurs in {})",
        names.join(" or ")
    )
}

pub(super) const MONTH_FULL_NAMES: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];
