//! A job's ticks: the union of its schedules, inside its active window.
//!
//! `schedule = ["0 12 * * 1-5", "0 20 * * 6"]` fires at every instant one of
//! the expressions does; an instant two of them share is one tick (each
//! expression keeps its own `H` and DST reading, so a tick is an instant on
//! the UTC time line, never a local time). `active_from` and
//! `active_until` bound the ticks: a tick counts when
//! `active_from <= tick < active_until`.

use std::fmt;

use chrono::{DateTime, Utc};

use super::{Schedule, Zone};

/// The instants a job's ticks may fall in: from `from` (inclusive) to
/// `until` (exclusive), each side open when unset.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Window {
    pub from: Option<DateTime<Utc>>,
    pub until: Option<DateTime<Utc>>,
}

impl Window {
    /// Whether `tick` is inside the window.
    pub fn contains(&self, tick: DateTime<Utc>) -> bool {
        self.from.is_none_or(|from| tick >= from) && self.until.is_none_or(|until| tick < until)
    }

    /// Whether the window bounds anything.
    pub fn is_open(&self) -> bool {
        self.from.is_none() && self.until.is_none()
    }
}

/// One or more schedules read in one zone, and the window their ticks
/// must fall in.
#[derive(Clone, PartialEq)]
pub struct Timetable {
    /// At least one; in the order written.
    schedules: Vec<Schedule>,
    window: Window,
}

/// How the expressions of a timetable are written on one line: ` | `
/// between them (a comma belongs to cron's own lists).
pub const EXPRESSION_SEPARATOR: &str = " | ";

impl Timetable {
    /// The timetable of `schedules` (at least one: `None` when empty)
    /// inside `window`.
    pub fn new(schedules: Vec<Schedule>, window: Window) -> Option<Timetable> {
        if schedules.is_empty() {
            return None;
        }
        Some(Timetable { schedules, window })
    }

    /// The schedules, in the order written.
    pub fn schedules(&self) -> &[Schedule] {
        &self.schedules
    }

    /// The first schedule (every timetable has one): its zone is the
    /// zone of them all.
    pub fn first(&self) -> &Schedule {
        &self.schedules[0]
    }

    /// The active window.
    pub fn window(&self) -> Window {
        self.window
    }

    /// The zone every expression is read in.
    pub fn timezone(&self) -> &Zone {
        self.first().timezone()
    }

    /// The expressions as written, on one line.
    pub fn expression(&self) -> String {
        self.join(Schedule::expression)
    }

    /// The expressions with `H` resolved, on one line.
    pub fn resolved(&self) -> String {
        self.join(Schedule::resolved)
    }

    /// The expressions in plain English, on one line (`; ` between them).
    #[cfg(any(feature = "dashboard", feature = "internals"))]
    pub fn describe(&self) -> String {
        let each: Vec<String> = self.schedules.iter().map(Schedule::describe).collect();
        each.join("; ")
    }

    fn join(&self, part: fn(&Schedule) -> &str) -> String {
        let each: Vec<&str> = self.schedules.iter().map(part).collect();
        each.join(EXPRESSION_SEPARATOR)
    }

    /// The first tick strictly after `after`: the earliest next instant of
    /// any expression, inside the window. `None` when there is none (every
    /// expression has ended, or the window has).
    pub fn next_after(&self, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        // The ticks start at `from`: search from just before it (the
        // expressions have whole seconds, so a second before is enough, and
        // a tick in that second before `from` is stepped over).
        let mut cursor = match self.window.from {
            Some(from) if after < from => from - chrono::Duration::seconds(1),
            _ => after,
        };
        loop {
            let tick = self
                .schedules
                .iter()
                .filter_map(|schedule| schedule.next_after(cursor))
                .min()?;
            if self.window.from.is_some_and(|from| tick < from) {
                cursor = tick;
                continue;
            }
            return self.window.contains(tick).then_some(tick);
        }
    }

    /// The next `count` ticks strictly after `after`.
    pub fn upcoming(&self, after: DateTime<Utc>, count: usize) -> Vec<DateTime<Utc>> {
        super::successive(|t| self.next_after(t), after, count)
    }

    /// The schedules that fire at `tick` (none when it is not a tick of
    /// any; the window is not asked).
    pub fn firing_at(&self, tick: DateTime<Utc>) -> Vec<&Schedule> {
        let before = tick - chrono::Duration::seconds(1);
        self.schedules
            .iter()
            .filter(|schedule| schedule.next_after(before) == Some(tick))
            .collect()
    }

    /// The last year any expression allows, when every one limits its
    /// years.
    pub fn last_year(&self) -> Option<u32> {
        self.schedules
            .iter()
            .map(Schedule::last_year)
            .collect::<Option<Vec<u32>>>()?
            .into_iter()
            .max()
    }
}

impl From<Schedule> for Timetable {
    /// A timetable of one schedule, without a window.
    fn from(schedule: Schedule) -> Timetable {
        Timetable {
            schedules: vec![schedule],
            window: Window::default(),
        }
    }
}

impl fmt::Debug for Timetable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // One schedule and no window: the schedule's own form, which
        // `Job::definition_hash` hashes, so that a job that uses neither
        // hashes as it always has.
        match self.schedules.as_slice() {
            [one] if self.window.is_open() => write!(f, "{one:?}"),
            many => {
                write!(f, "Timetable({many:?}")?;
                if let Some(from) = self.window.from {
                    write!(f, ", from {}", from.timestamp_millis())?;
                }
                if let Some(until) = self.window.until {
                    write!(f, ", until {}", until.timestamp_millis())?;
                }
                f.write_str(")")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schedule::{DstPolicy, Schedule, Zone};

    fn at(text: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(text)
            .expect("a valid instant")
            .with_timezone(&Utc)
    }

    fn berlin(expressions: &[&str], window: Window) -> Timetable {
        let zone = Zone::parse("Europe/Berlin").expect("a known zone");
        let schedules = expressions
            .iter()
            .map(|e| Schedule::parse(e, zone.clone(), "j", DstPolicy::default()).expect("valid"))
            .collect();
        Timetable::new(schedules, window).expect("at least one")
    }

    fn texts(ticks: Vec<DateTime<Utc>>) -> Vec<String> {
        ticks
            .into_iter()
            .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
            .collect()
    }

    #[test]
    fn the_union_across_the_spring_gap_is_one_tick_per_instant() {
        // 2026-03-29: 02:00 CET becomes 03:00 CEST at 01:00 UTC. The
        // hourly wall-clock expression has no 02:00; the fixed-time 02:30
        // runs at the end of the gap, 03:00 CEST, which the hourly one
        // fires at too: one tick.
        let timetable = berlin(&["0 * * * *", "30 2 * * *"], Window::default());
        assert_eq!(
            texts(timetable.upcoming(at("2026-03-28T23:30:00Z"), 3)),
            [
                "2026-03-29T00:00:00Z",
                "2026-03-29T01:00:00Z",
                "2026-03-29T02:00:00Z"
            ]
        );
        let both = timetable.firing_at(at("2026-03-29T01:00:00Z"));
        assert_eq!(both.len(), 2, "both expressions fire at 03:00 CEST");
    }

    #[test]
    fn the_union_across_the_autumn_fold_keeps_each_expressions_rule() {
        // 2026-10-25: 03:00 CEST becomes 02:00 CET at 01:00 UTC; 02:30
        // happens twice. The fixed-time expression runs at the first
        // 02:30 only, the wall-clock one at both: the first is shared.
        let timetable = berlin(&["30 2 * * *", "30 * * * *"], Window::default());
        assert_eq!(
            texts(timetable.upcoming(at("2026-10-24T23:45:00Z"), 3)),
            [
                "2026-10-25T00:30:00Z",
                "2026-10-25T01:30:00Z",
                "2026-10-25T02:30:00Z"
            ]
        );
    }

    #[test]
    fn weekdays_at_noon_and_saturdays_at_eight() {
        let zone = Zone::parse("Asia/Shanghai").expect("a known zone");
        let schedules = ["0 12 * * 1-5", "0 20 * * 6"]
            .iter()
            .map(|e| Schedule::parse(e, zone.clone(), "j", DstPolicy::default()).expect("valid"))
            .collect();
        let timetable = Timetable::new(schedules, Window::default()).expect("two");
        // Thursday 2026-11-26, 13:00 in Shanghai: Friday noon, Saturday
        // 20:00, Monday noon.
        assert_eq!(
            texts(timetable.upcoming(at("2026-11-26T05:00:00Z"), 3)),
            [
                "2026-11-27T04:00:00Z",
                "2026-11-28T12:00:00Z",
                "2026-11-30T04:00:00Z"
            ]
        );
        assert_eq!(timetable.expression(), "0 12 * * 1-5 | 0 20 * * 6");
    }

    #[test]
    fn the_window_holds_ticks_from_its_start_up_to_its_end() {
        let window = Window {
            from: Some(at("2026-11-26T10:00:00.500Z")),
            until: Some(at("2026-11-26T10:00:04Z")),
        };
        let timetable = berlin(&["* * * * * *"], window);
        // 10:00:00 is before the start (by half a second); 10:00:04 is the
        // end, not included.
        assert_eq!(
            texts(timetable.upcoming(at("2026-11-26T09:00:00Z"), 10)),
            [
                "2026-11-26T10:00:01Z",
                "2026-11-26T10:00:02Z",
                "2026-11-26T10:00:03Z"
            ]
        );
        assert_eq!(timetable.next_after(at("2026-11-26T10:00:03Z")), None);
    }

    #[test]
    fn one_schedule_without_a_window_reads_as_the_schedule() {
        let zone = Zone::utc();
        let schedule = Schedule::parse("@daily", zone, "j", DstPolicy::default()).expect("valid");
        let timetable = Timetable::from(schedule.clone());
        assert_eq!(format!("{timetable:?}"), format!("{schedule:?}"));
    }
}
