//! The sets a cron expression's day and year fields are read into, and how
//! a date matches them: plain days and weekdays as bits, Quartz's `L`, `W`
//! and `#`, and years as stepped ranges.
//!
//! `expr` fills these from the text; `search` asks them whether a date
//! matches (through `Expr::day_matches`, which combines the two day fields
//! by cronie's day rule).

/// The first and last year a year field may name. The upper bound is where
/// the calendar arithmetic of the time-zone library ends; the lower one is
/// the Unix epoch, before which no tick can be claimed.
pub(super) const FIRST_YEAR: u32 = 1970;
pub(super) const LAST_YEAR: u32 = 9999;

/// A set of small numbers as bits (bit n: value n allowed).
pub(super) type Bits = u64;

/// The day-of-month field.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct DaysOfMonth {
    /// Plain days, bit n for day n.
    pub(super) days: Bits,
    /// `L`: the last day of the month.
    pub(super) last: Option<LastDay>,
    /// `nW`: the weekday (Monday to Friday) nearest to day n, in its month.
    pub(super) nearest_weekday: Bits,
}

/// Which last day `L` means in the day-of-month field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum LastDay {
    /// `L`: the month's last day.
    Day,
    /// `LW`: the month's last Monday-to-Friday.
    Weekday,
}

/// The day-of-week field.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct DaysOfWeek {
    /// Plain weekdays, bit 0 Sunday to bit 6 Saturday.
    pub(super) weekdays: Bits,
    /// `d#n`: bit `(n - 1) * 7 + d` for the n-th weekday d of the month.
    pub(super) nth: Bits,
    /// `dL`: bit d for the last weekday d of the month.
    pub(super) last: Bits,
}

/// The year field: `None` for `*`, else the allowed years as ranges with a
/// step (a bit per year would take a kilobyte per schedule).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Years(pub(super) Option<Vec<(u32, u32, u32)>>);

impl Years {
    /// The first allowed year at or after `year`.
    pub(super) fn first_from(&self, year: u32) -> Option<u32> {
        let Some(ranges) = &self.0 else {
            return (year <= LAST_YEAR).then_some(year);
        };
        ranges
            .iter()
            .filter_map(|&(first, last, step)| {
                if year <= first {
                    Some(first)
                } else {
                    let next = first + (year - first).div_ceil(step) * step;
                    (next <= last).then_some(next)
                }
            })
            .min()
    }

    /// The last allowed year, if the field limits it.
    pub(super) fn last(&self) -> Option<u32> {
        self.0.as_ref().and_then(|ranges| {
            ranges
                .iter()
                .map(|&(first, last, step)| first + (last - first) / step * step)
                .max()
        })
    }
}

impl DaysOfMonth {
    /// Whether day `day` (a `weekday`, 0 Sunday) of a month of
    /// `month_length` days is in the set.
    pub(super) fn matches(&self, day: u32, weekday: u32, month_length: u32) -> bool {
        if self.days & bit(day) != 0 {
            return true;
        }
        let is_weekday = (1..=5).contains(&weekday);
        let last_weekday = || match weekday_of(day, weekday, month_length) {
            6 => month_length - 1,
            0 => month_length - 2,
            _ => month_length,
        };
        match self.last {
            Some(LastDay::Day) if day == month_length => return true,
            Some(LastDay::Weekday) if day == last_weekday() => return true,
            _ => {}
        }
        if self.nearest_weekday == 0 || !is_weekday {
            return false;
        }
        // `nW` is day n if that is a weekday, else the Friday before a
        // Saturday or the Monday after a Sunday, never leaving the month
        // (1W on a Saturday is Monday the 3rd; 31W on a Sunday is Friday the
        // 29th). So only days n-2..n+2 can be the answer for day `day`.
        (day.saturating_sub(2).max(1)..=(day + 2).min(month_length)).any(|n| {
            self.nearest_weekday & bit(n) != 0
                && nearest_weekday(n, weekday_of(day, weekday, n), month_length) == day
        })
    }
}

/// The weekday of day `other` of the month, given day `day`'s weekday.
fn weekday_of(day: u32, weekday: u32, other: u32) -> u32 {
    (weekday + 35 + other - day) % 7
}

/// Quartz's `nW` for one month: day n if it is Monday to Friday, else the
/// nearest such day within the month.
fn nearest_weekday(n: u32, weekday_of_n: u32, month_length: u32) -> u32 {
    match weekday_of_n {
        6 if n == 1 => 3,
        6 => n - 1,
        0 if n == month_length => n - 2,
        0 => n + 1,
        _ => n,
    }
}

impl DaysOfWeek {
    /// Whether day `day` (a `weekday`, 0 Sunday) of a month of
    /// `month_length` days is in the set.
    pub(super) fn matches(&self, day: u32, weekday: u32, month_length: u32) -> bool {
        let nth = (day - 1) / 7; // 0 for days 1-7, the first such weekday
        self.weekdays & bit(weekday) != 0
            || self.nth & bit(nth * 7 + weekday) != 0
            || (self.last & bit(weekday) != 0 && day + 7 > month_length)
    }
}

/// The set holding only `n`.
pub(super) fn bit(n: u32) -> Bits {
    1 << n
}
