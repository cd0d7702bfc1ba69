//! Finding the next tick: a calendar search in local time, and the mapping
//! of local times onto the UTC time line with cronie's daylight-saving rules.
//!
//! The zone's time line is cut at its transitions into segments of one UTC
//! offset. Inside a segment local time is UTC plus that offset, so the first
//! matching local time in the segment is its first tick. At a transition two
//! things can happen, and the rules apply to fixed-time jobs only (minute and
//! hour not `*`-led); wall-clock jobs take the local time as it is, skipped
//! or repeated:
//!
//! - the clock jumps forward (a gap): local times in the gap do not exist. A
//!   fixed-time job with a time there runs at the transition itself, the first
//!   instant after the gap, once however many of its times the gap swallowed
//!   (`dst_gap = "run_after"`, cronie), or not at all (`"skip"`);
//! - the clock goes back (a repeat): local times just before the transition
//!   come again after it. A fixed-time job runs at their first occurrence
//!   only (`dst_repeat = "first"`, cronie), or at both (`"both"`).

use jiff::Timestamp;

use super::calendar::{civil_from_days, days_from_civil, days_in_month};
use super::expr::Expr;
use super::sets::{FIRST_YEAR, LAST_YEAR};
use super::{DstGap, DstPolicy, DstRepeat, Timing, Zone};

const DAY: i64 = 86_400;

/// More than the largest difference between two UTC offsets of one zone
/// (26 hours: −12:00 to +14:00), so a local time this far before a search's
/// start cannot belong to a later instant.
const MAX_SHIFT: i64 = 27 * 3600;

/// The first tick strictly after `after` (seconds since the epoch), or
/// `None` if the expression matches no later local time.
pub(super) fn next_after(expr: &Expr, zone: &Zone, dst: DstPolicy, after: i64) -> Option<i64> {
    let fixed = expr.timing == Timing::FixedTime;
    let mut t = after.checked_add(1)?;
    let offset = zone.offset_at(t)?;
    // No matching local time from well before this instant on: nothing
    // later can match either, however the offset changes.
    next_local(expr, t + i64::from(offset) - MAX_SHIFT)?;
    loop {
        let offset = i64::from(zone.offset_at(t)?);
        let segment_start = zone.transition_at_or_before(t);
        let segment_end = zone.transition_after(t);
        let offset_before = match segment_start {
            Some(start) => Some(i64::from(zone.offset_at(start - 1)?)),
            None => None,
        };

        // The gap this segment starts with, if we stand at its start.
        if let (Some(start), Some(before)) = (segment_start, offset_before)
            && start == t
            && offset > before
            && fixed
            && dst.gap == DstGap::RunAfter
            && next_local(expr, start + before).is_some_and(|local| local < start + offset)
        {
            return Some(start);
        }

        let mut wall_from = t + offset;
        if let (Some(start), Some(before)) = (segment_start, offset_before)
            && offset < before
            && fixed
            && dst.repeat == DstRepeat::First
        {
            // The local times [start + offset, start + before) came once
            // already, before the clock went back.
            wall_from = wall_from.max(start + before);
        }
        let local = next_local(expr, wall_from);
        match (local, segment_end) {
            (Some(local), Some(end)) if local < end + offset => return Some(local - offset),
            (Some(local), None) => return Some(local - offset),
            (_, Some(end)) => t = end,
            (None, None) => return None,
        }
    }
}

/// The first local time (seconds since the epoch, as if the zone were UTC)
/// at or after `from` that every field matches: field by field from the
/// year down, each field that has no match left moving the next larger one
/// on and starting the smaller ones over.
pub(super) fn next_local(expr: &Expr, from: i64) -> Option<i64> {
    let first = days_from_civil(FIRST_YEAR, 1, 1) * DAY;
    let mut at = Cursor::at(from.max(first));
    loop {
        if at.year > LAST_YEAR {
            return None;
        }
        let found_year = expr.years.first_from(at.year)?;
        if found_year != at.year {
            at = Cursor::start_of_year(found_year);
        }
        let Some(found_month) = first_bit_from(expr.months, at.month, 12) else {
            at = Cursor::start_of_year(at.year + 1);
            continue;
        };
        if found_month != at.month {
            at = Cursor {
                month: found_month,
                day: 1,
                ..at.start_of_day()
            };
        }
        let month_length = days_in_month(at.year, at.month);
        let Some(found_day) =
            (at.day..=month_length).find(|&d| expr.day_matches(at.year, at.month, d))
        else {
            at.next_month();
            continue;
        };
        if found_day != at.day {
            at = Cursor {
                day: found_day,
                ..at.start_of_day()
            };
        }
        let Some(found_hour) = first_bit_from(expr.hours, at.hour, 23) else {
            at.next_day();
            continue;
        };
        if found_hour != at.hour {
            (at.hour, at.minute, at.second) = (found_hour, 0, 0);
        }
        let Some(found_minute) = first_bit_from(expr.minutes, at.minute, 59) else {
            at.next_hour();
            continue;
        };
        if found_minute != at.minute {
            (at.minute, at.second) = (found_minute, 0);
        }
        let Some(found_second) = first_bit_from(expr.seconds, at.second, 59) else {
            at.next_minute();
            continue;
        };
        at.second = found_second;
        return Some(at.local_seconds());
    }
}

/// Where [`next_local`] stands: a local date and time, field by field.
#[derive(Debug, Clone, Copy)]
struct Cursor {
    year: u32,
    month: u32,
    day: u32,
    hour: u32,
    minute: u32,
    second: u32,
}

impl Cursor {
    /// The date and time of local time `local` (seconds since the epoch,
    /// as if the zone were UTC).
    fn at(local: i64) -> Cursor {
        let (year, month, day) = civil_from_days(local.div_euclid(DAY));
        let second_of_day = local.rem_euclid(DAY);
        Cursor {
            year,
            month,
            day,
            hour: (second_of_day / 3600) as u32,
            minute: (second_of_day / 60 % 60) as u32,
            second: (second_of_day % 60) as u32,
        }
    }

    /// Midnight of January 1 of `year`.
    fn start_of_year(year: u32) -> Cursor {
        Cursor {
            year,
            month: 1,
            day: 1,
            hour: 0,
            minute: 0,
            second: 0,
        }
    }

    /// Midnight of the same day.
    fn start_of_day(self) -> Cursor {
        Cursor {
            hour: 0,
            minute: 0,
            second: 0,
            ..self
        }
    }

    /// Midnight of the first day of the next month.
    fn next_month(&mut self) {
        *self = Cursor {
            day: 1,
            ..self.start_of_day()
        };
        (self.year, self.month) = if self.month == 12 {
            (self.year + 1, 1)
        } else {
            (self.year, self.month + 1)
        };
    }

    /// Midnight of the next day.
    fn next_day(&mut self) {
        *self = self.start_of_day();
        (self.year, self.month, self.day) = next_day(self.year, self.month, self.day);
    }

    /// The start of the next hour.
    fn next_hour(&mut self) {
        if self.hour == 23 {
            self.next_day();
        } else {
            (self.hour, self.minute, self.second) = (self.hour + 1, 0, 0);
        }
    }

    /// The start of the next minute.
    fn next_minute(&mut self) {
        if self.minute == 59 {
            self.next_hour();
        } else {
            (self.minute, self.second) = (self.minute + 1, 0);
        }
    }

    /// Back to seconds since the epoch (local, as if the zone were UTC).
    fn local_seconds(self) -> i64 {
        days_from_civil(self.year, self.month, self.day) * DAY
            + i64::from(self.hour) * 3600
            + i64::from(self.minute) * 60
            + i64::from(self.second)
    }
}

/// The lowest set bit at or above `from`, up to `last`.
fn first_bit_from(bits: u64, from: u32, last: u32) -> Option<u32> {
    if from > last {
        return None;
    }
    let masked = bits >> from << from;
    let found = masked.trailing_zeros();
    (found <= last).then_some(found)
}

fn next_day(year: u32, month: u32, day: u32) -> (u32, u32, u32) {
    if day < days_in_month(year, month) {
        (year, month, day + 1)
    } else if month < 12 {
        (year, month + 1, 1)
    } else {
        (year + 1, 1, 1)
    }
}

/// The UTC offset in force at `second`, and the transitions around it.
impl Zone {
    pub(super) fn offset_at(&self, second: i64) -> Option<i32> {
        let timestamp = Timestamp::from_second(second).ok()?;
        Some(self.tz.to_offset(timestamp).seconds())
    }

    /// The last transition at or before `second`.
    fn transition_at_or_before(&self, second: i64) -> Option<i64> {
        let timestamp = Timestamp::from_second(second.checked_add(1)?).ok()?;
        self.tz
            .preceding(timestamp)
            .next()
            .map(|t| t.timestamp().as_second())
    }

    /// The first transition strictly after `second`.
    fn transition_after(&self, second: i64) -> Option<i64> {
        let timestamp = Timestamp::from_second(second).ok()?;
        self.tz
            .following(timestamp)
            .next()
            .map(|t| t.timestamp().as_second())
    }
}
