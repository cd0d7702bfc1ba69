//! The local clock in milliseconds (and microseconds), and how a Redis-time instant is shown.

use std::time::{SystemTime, UNIX_EPOCH};

use chrono::{DateTime, Utc};

pub fn local_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

pub fn local_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as i64)
}

pub fn format_ms(ms: i64) -> String {
    DateTime::<Utc>::from_timestamp_millis(ms)
        .map_or_else(|| ms.to_string(), |t| t.format("%H:%M:%S%.3f").to_string())
}
