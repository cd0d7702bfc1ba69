//! Redis time, as this replica estimates it between round trips.
//!
//! The authority on "is this tick due" is the Redis server clock (`TIME`, read
//! inside the claim script). To sleep until a tick without asking Redis every
//! millisecond, the replica keeps the offset between its own wall clock and
//! Redis's, measured every few heartbeats from the midpoint of the round trip.
//! Offset and wake-ups are kept in microseconds (`TIME` gives them): with
//! whole milliseconds the local clock's truncation alone would wake a replica up
//! to 1 ms after its tick.
//! A host whose clock is off by seconds still wakes at the right moment, and
//! if the estimate is early the claim script answers `early` and the replica
//! sleeps the rest. This is the only place that reads the wall clock.

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::time::Instant;

/// Local wall clock plus a measured offset to Redis time.
#[derive(Debug, Default)]
pub struct RedisClock {
    /// Redis time minus local wall time, µs.
    offset_us: AtomicI64,
}

/// Local wall time, ms since the epoch.
pub fn local_now_ms() -> i64 {
    local_now_us().div_euclid(1000)
}

/// Local wall time as a UTC date and time (what `check` reads schedules
/// from, and a job's end warnings are judged against).
pub fn local_now_utc() -> chrono::DateTime<chrono::Utc> {
    chrono::DateTime::from_timestamp_micros(local_now_us()).unwrap_or_default()
}

/// Local wall time, µs since the epoch.
pub fn local_now_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

impl RedisClock {
    pub fn new() -> RedisClock {
        RedisClock::default()
    }

    /// Records a `TIME` reply (µs) read between local times `sent_us` and
    /// `received_us`.
    pub fn observe(&self, server_us: i64, sent_us: i64, received_us: i64) {
        let midpoint = sent_us + (received_us - sent_us) / 2;
        self.offset_us
            .store(server_us - midpoint, Ordering::Relaxed);
    }

    /// Redis time minus local time, µs.
    pub fn offset_us(&self) -> i64 {
        self.offset_us.load(Ordering::Relaxed)
    }

    /// Estimated Redis time now, µs since the epoch.
    fn now_us(&self) -> i64 {
        local_now_us() + self.offset_us()
    }

    /// Estimated Redis time now, ms since the epoch.
    pub fn now_ms(&self) -> i64 {
        self.now_us().div_euclid(1000)
    }

    /// The monotonic instant at which Redis time is estimated to reach
    /// `redis_ms` (now, if it has passed).
    pub fn instant_at(&self, redis_ms: i64) -> Instant {
        let ahead_us = redis_ms.saturating_mul(1000) - self.now_us();
        Instant::now() + Duration::from_micros(u64::try_from(ahead_us).unwrap_or(0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offset_from_the_midpoint() {
        let clock = RedisClock::new();
        clock.observe(10_500_000, 1_000_000, 1_010_000);
        assert_eq!(clock.offset_us(), 9_495_000);
        let now = clock.now_ms();
        assert!((now - (local_now_ms() + 9_495)).abs() < 50);
    }
}
