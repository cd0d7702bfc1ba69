//! The daemon's small time helpers: when a tick counts as late, how an
//! instant is written, and a sleep that a cancellation cuts short.

use std::time::Duration;

use chrono::{DateTime, SecondsFormat, Utc};
use tokio::time::sleep;
use tokio_util::sync::CancellationToken;

/// A tick claimed no later than this after its time is on time; older
/// unclaimed ticks are missed and go to the misfire policy.
pub(super) const LATE_MS: i64 = 1_000;

/// The instant `ms` (Unix ms), as chrono has it.
pub(super) fn to_datetime(ms: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(ms).unwrap_or_default()
}

/// The instant `ms` (Unix ms) as RFC 3339, to the millisecond, in UTC.
pub(super) fn rfc3339(ms: i64) -> String {
    to_datetime(ms).to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// Sleeps, unless cancelled; false when cancelled.
pub(super) async fn pause(duration: Duration, cancel: &CancellationToken) -> bool {
    tokio::select! {
        () = cancel.cancelled() => false,
        () = sleep(duration) => true,
    }
}
