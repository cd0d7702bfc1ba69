//! How the dashboard writes times and durations.

use chrono::{DateTime, Utc};

/// `2026-11-24 06:00:00Z`.
pub(super) fn utc(ms: i64) -> String {
    DateTime::<Utc>::from_timestamp_millis(ms)
        .map(|t| t.format("%Y-%m-%d %H:%M:%SZ").to_string())
        .unwrap_or_default()
}

/// RFC 3339, for `<time datetime>`.
pub(super) fn iso(ms: i64) -> String {
    DateTime::<Utc>::from_timestamp_millis(ms)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
        .unwrap_or_default()
}

/// `06:00:00` UTC.
pub(super) fn clock(ms: i64) -> String {
    DateTime::<Utc>::from_timestamp_millis(ms)
        .map(|t| t.format("%H:%M:%S").to_string())
        .unwrap_or_default()
}

/// A duration for people: `850 ms`, `4.2 s`, `3 min 4 s`, `2 h 5 min`,
/// `3 d 4 h` (as `explain` writes them).
pub(super) fn duration(ms: i64) -> String {
    crate::operator::span(ms)
}

pub(super) fn ago(now_ms: i64, ms: i64) -> String {
    if ms <= 0 {
        return "–".to_string();
    }
    format!("{} ago", duration(now_ms.saturating_sub(ms)))
}

pub(super) fn until(now_ms: i64, ms: i64) -> String {
    format!("in {}", duration(ms.saturating_sub(now_ms)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_people_say_them() {
        assert_eq!(duration(850), "850 ms");
        assert_eq!(duration(4_200), "4.2 s");
        assert_eq!(duration(184_000), "3 min 4 s");
        assert_eq!(duration(7_500_000), "2 h 5 min");
        assert_eq!(duration(-5), "0 ms");
    }
}
