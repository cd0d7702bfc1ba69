//! Redis time, as this replica estimates it between round trips.
//!
//! The authority on "is this tick due" is the Redis server clock (`TIME`, read
//! inside the claim script). To sleep until a tick without asking Redis every
//! millisecond, the replica keeps the offset between its own wall clock and
//! Redis's, measured at each heartbeat from the midpoint of the round trip.
//! A host whose clock is off by seconds still wakes at the right moment, and
//! if the estimate is early the claim script answers `early` and the replica
//! sleeps the rest. This is the only place that reads the wall clock.

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::time::Instant;

/// Local wall clock plus a measured offset to Redis time.
#[derive(Debug, Default)]
pub struct RedisClock {
    /// Redis time minus local wall time, ms.
    offset_ms: AtomicI64,
}

/// Local wall time, ms since the epoch.
pub fn local_now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

impl RedisClock {
    pub fn new() -> RedisClock {
        RedisClock::default()
    }

    /// Records a `TIME` reply read between local times `sent_ms` and
    /// `received_ms`.
    pub fn observe(&self, server_ms: i64, sent_ms: i64, received_ms: i64) {
        let midpoint = sent_ms + (received_ms - sent_ms) / 2;
        self.offset_ms
            .store(server_ms - midpoint, Ordering::Relaxed);
    }

    /// Redis time minus local time, ms.
    pub fn offset_ms(&self) -> i64 {
        self.offset_ms.load(Ordering::Relaxed)
    }

    /// Estimated Redis time now, ms since the epoch.
    pub fn now_ms(&self) -> i64 {
        local_now_ms() + self.offset_ms()
    }

    /// The monotonic instant at which Redis time is estimated to reach
    /// `redis_ms` (now, if it has passed).
    pub fn instant_at(&self, redis_ms: i64) -> Instant {
        let ahead = redis_ms - self.now_ms();
        Instant::now() + Duration::from_millis(u64::try_from(ahead).unwrap_or(0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offset_from_the_midpoint() {
        let clock = RedisClock::new();
        clock.observe(10_500, 1_000, 1_010);
        assert_eq!(clock.offset_ms(), 9_495);
        let now = clock.now_ms();
        assert!((now - (local_now_ms() + 9_495)).abs() < 50);
    }
}
