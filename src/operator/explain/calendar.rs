//! Where an instant stands in a job's schedule, for `explain`: whether it
//! is a tick, the ticks before and after it, and the daylight-saving
//! change of the job's zone near it with the rule the schedule applied.
//!
//! `schedule` only searches forwards (`Schedule::next_after`), so the
//! previous tick is found by searching forwards from ever earlier
//! instants: a window that grows fourfold until it holds a tick.

use chrono::DateTime;

use super::report::{DstFacts, text_of};
use crate::schedule::{DstGap, DstRepeat, Schedule, Timetable, Timing};

/// The largest window searched backwards for a previous tick (~400 years):
/// a schedule with no tick in it has none the operator cares about.
const LONGEST_LOOK_BACK_MS: i64 = 400 * 366 * 86_400_000;

/// The first window searched for a previous tick: at most 60 ticks (a
/// schedule fires at most once a second) are stepped through in it.
const SMALLEST_WINDOW_MS: i64 = 60_000;

/// Rounds of the previous-tick search: the gap to the tick shrinks by a
/// quarter at least each round, from 400 years to a minute in about 70.
const MOST_ROUNDS: usize = 200;

/// How far from the instant a daylight-saving change is still named.
const DST_NEIGHBOURHOOD_S: i64 = 86_400;

/// Where `at_ms` stands in a schedule.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Around {
    /// `at_ms` is an instant the schedule fires at.
    pub is_tick: IsTick,
    /// The last tick strictly before `at_ms`.
    pub previous_ms: Option<i64>,
    /// The first tick strictly after `at_ms`; none once the schedule's
    /// years have passed.
    pub next_ms: Option<i64>,
    /// The daylight-saving change within a day of `at_ms`, if any.
    pub dst: Option<DstFacts>,
}

/// Whether an instant is a tick.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum IsTick {
    Yes,
    No,
}

/// Where `at_ms` stands in `schedule`.
pub(super) fn around(schedule: &Timetable, at_ms: i64) -> Around {
    let next_ms = next_after_ms(schedule, at_ms);
    let is_tick = if at_ms % 1000 == 0 && next_after_ms(schedule, at_ms - 1000) == Some(at_ms) {
        IsTick::Yes
    } else {
        IsTick::No
    };
    Around {
        is_tick,
        previous_ms: previous_tick(schedule, at_ms),
        next_ms,
        dst: dst_near(schedule, at_ms),
    }
}

/// The latest tick at or before `now_ms` (the tick `explain` explains by
/// default), if the schedule has had one.
pub(super) fn latest_due(schedule: &Timetable, now_ms: i64) -> Option<i64> {
    previous_tick(schedule, now_ms.saturating_add(1))
}

/// The first tick strictly after `at_ms`.
pub(super) fn next_after_ms(schedule: &Timetable, at_ms: i64) -> Option<i64> {
    // `next_after` counts in whole seconds: the second holding `at_ms`
    // is "at or before", so a tick at that very second is not after it.
    let after = DateTime::from_timestamp_millis(at_ms.div_euclid(1000) * 1000)?;
    let tick = schedule.next_after(after)?.timestamp_millis();
    if tick > at_ms {
        Some(tick)
    } else {
        schedule
            .next_after(DateTime::from_timestamp_millis(tick)?)
            .map(|t| t.timestamp_millis())
    }
}

/// The last tick strictly before `before_ms`. Each round finds the
/// smallest window before `before` (60 s, growing fourfold) that holds a
/// tick; the last quarter of a larger one holds none, so the search goes
/// on from its start, until a 60-second window holds the tick, stepped
/// through. The gap shrinks by a quarter at least each round.
fn previous_tick(schedule: &Timetable, before_ms: i64) -> Option<i64> {
    let mut before = before_ms;
    for _ in 0..MOST_ROUNDS {
        let mut window = SMALLEST_WINDOW_MS;
        loop {
            if window > LONGEST_LOOK_BACK_MS {
                return None;
            }
            let start = before.checked_sub(window)?;
            match next_after_ms(schedule, start - 1) {
                Some(tick) if tick < before => break,
                _ => window = window.saturating_mul(4),
            }
        }
        if window == SMALLEST_WINDOW_MS {
            let mut cursor = before - window - 1;
            let mut last = None;
            while let Some(tick) = next_after_ms(schedule, cursor).filter(|t| *t < before) {
                last = Some(tick);
                cursor = tick;
            }
            return last;
        }
        before -= window / 4;
    }
    None
}

/// The last tick of a schedule whose year field ends at `last_year`.
pub(super) fn last_tick(schedule: &Timetable, last_year: u32) -> Option<i64> {
    let after =
        chrono::NaiveDate::from_ymd_opt(i32::try_from(last_year).ok()?.checked_add(1)?, 1, 2)?
            .and_hms_opt(0, 0, 0)?
            .and_utc()
            .timestamp_millis();
    previous_tick(schedule, after)
}

/// The daylight-saving change of the job's zone within a day of `at_ms`,
/// and the rule the schedule applies to it.
fn dst_near(timetable: &Timetable, at_ms: i64) -> Option<DstFacts> {
    // The rule of the expression that fires at the instant (the first
    // one's when none does).
    let schedule = DateTime::from_timestamp_millis(at_ms)
        .and_then(|at| timetable.firing_at(at).first().copied())
        .unwrap_or_else(|| timetable.first());
    let tz = jiff::tz::TimeZone::get(schedule.timezone().name()).ok()?;
    let at = jiff::Timestamp::from_second(at_ms.div_euclid(1000)).ok()?;
    let window = jiff::SignedDuration::from_secs(DST_NEIGHBOURHOOD_S);
    let near = |t: jiff::Timestamp| t.duration_since(at).abs() <= window;
    let transition = tz
        .following(at.checked_sub(window).ok()?)
        .next()
        .filter(|t| near(t.timestamp()))?;
    let when = transition.timestamp();
    let before = tz.to_offset(when.checked_sub(jiff::SignedDuration::from_secs(1)).ok()?);
    let after = transition.offset();
    let local = |offset: jiff::tz::Offset| {
        when.to_zoned_datetime(jiff::tz::TimeZone::fixed(offset))
            .strftime("%H:%M")
            .to_string()
    };
    let (kind, local_times) = if after > before {
        ("gap", format!("{}–{}", local(before), local(after)))
    } else {
        ("fold", format!("{}–{}", local(after), local(before)))
    };
    let transition_text = text_of(when.as_millisecond());
    let (rule, effect) = dst_rule(schedule, kind, &local_times, &transition_text);
    Some(DstFacts {
        kind,
        transition: transition_text,
        local_times,
        timing: schedule.timing().as_str(),
        rule,
        effect,
    })
}

/// The setting that decides what the schedule does at a change of kind
/// `kind`, and what it does.
fn dst_rule(
    schedule: &Schedule,
    kind: &str,
    local_times: &str,
    transition: &str,
) -> (String, String) {
    let zone = schedule.timezone().name();
    if schedule.timing() == Timing::WallClock {
        let effect = if kind == "gap" {
            format!(
                "the job follows the wall clock: its times in {local_times} do not exist in {zone} that day and do not fire"
            )
        } else {
            format!(
                "the job follows the wall clock: its times in {local_times} happen twice in {zone} that day and fire twice"
            )
        };
        return ("wall clock".to_string(), effect);
    }
    let policy = schedule.dst();
    match (kind, policy.gap, policy.repeat) {
        ("gap", DstGap::Skip, _) => (
            "dst_gap = skip".to_string(),
            format!(
                "a time of the job in {local_times} does not exist in {zone} that day, and dst_gap = skip does not run it"
            ),
        ),
        ("gap", _, _) => (
            "dst_gap = run_after".to_string(),
            format!(
                "a time of the job in {local_times} does not exist in {zone} that day; dst_gap = run_after runs it once at {transition}, the first instant after the gap"
            ),
        ),
        (_, _, DstRepeat::Both) => (
            "dst_repeat = both".to_string(),
            format!(
                "the local times {local_times} happen twice in {zone} that day; dst_repeat = both runs the job's times there at both occurrences"
            ),
        ),
        _ => (
            "dst_repeat = first".to_string(),
            format!(
                "the local times {local_times} happen twice in {zone} that day; dst_repeat = first runs the job's times there at their first occurrence only"
            ),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schedule::{DstPolicy, Zone};

    fn ms(text: &str) -> i64 {
        DateTime::parse_from_rfc3339(text)
            .expect("a valid instant")
            .timestamp_millis()
    }

    fn berlin(expression: &str) -> Timetable {
        let zone = Zone::parse("Europe/Berlin").expect("a known zone");
        Schedule::parse(expression, zone, "j", DstPolicy::default())
            .expect("a valid schedule")
            .into()
    }

    #[test]
    fn a_tick_has_its_neighbours_and_an_instant_between_is_none() {
        let schedule = berlin("0 30 2 * * *");
        let at = around(&schedule, ms("2026-03-29T01:30:00Z"));
        assert_eq!(at.is_tick, IsTick::No);
        // 02:30 does not exist that day: run at the gap's end, 03:00 CEST.
        assert_eq!(at.previous_ms, Some(ms("2026-03-29T01:00:00Z")));
        assert_eq!(at.next_ms, Some(ms("2026-03-30T00:30:00Z")));
        let dst = at.dst.expect("the change of 2026-03-29 is near");
        assert_eq!(dst.kind, "gap");
        assert_eq!(dst.local_times, "02:00–03:00");
        assert_eq!(dst.rule, "dst_gap = run_after");
        let tick = around(&schedule, ms("2026-03-29T01:00:00Z"));
        assert_eq!(tick.is_tick, IsTick::Yes);
        assert_eq!(
            latest_due(&schedule, ms("2026-03-29T01:00:00Z")),
            Some(ms("2026-03-29T01:00:00Z"))
        );
    }

    #[test]
    fn a_fold_names_the_first_occurrence_rule() {
        let schedule = berlin("0 30 2 * * *");
        let at = around(&schedule, ms("2026-10-25T01:30:00Z"));
        assert_eq!(at.is_tick, IsTick::No, "the second 02:30 does not run");
        let dst = at.dst.expect("the change of 2026-10-25 is near");
        assert_eq!(dst.kind, "fold");
        assert_eq!(dst.rule, "dst_repeat = first");
    }
}
