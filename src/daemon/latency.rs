//! How long this replica's claims lately took: what sets how far ahead of
//! a tick the preferred replica claims, and how long the others wait
//! their turn (`rendezvous::rank_wait`).

use std::sync::PoisonError;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::time::Instant;

/// The least a preferred replica claims ahead of its tick: a claim's round
/// trip on a quiet machine, and the timer's whole-ms wake-up, fit in it.
const MIN_LEAD: Duration = Duration::from_millis(3);

/// The most a preferred replica claims ahead of its tick.
const MAX_LEAD: Duration = Duration::from_millis(500);

/// How fast the slowest recent claim is forgotten: its weight halves
/// every this long.
const PEAK_HALF_LIFE: Duration = Duration::from_secs(10);

/// How long this replica's claims as the preferred replica took, from the
/// instant the job loop meant to wake for the claim to Redis's first
/// answer (a later one may come after a wait for the tick): the
/// load on the claim path (waking the job loops due at one instant,
/// queueing their claims, Redis running them). Two figures: a moving
/// average (7/8 old, 1/8 new), which sets how long the other ranks wait
/// ([`rank_wait`]), and the slowest recent claim, whose weight halves every
/// [`PEAK_HALF_LIFE`], which sets how far ahead of a tick to claim it
/// ([`ClaimLatency::lead`]): the last claim of a burst of ticks due at one
/// instant must be answered by the tick, not the average one.
#[derive(Default)]
pub(super) struct ClaimLatency {
    average_us: std::sync::atomic::AtomicU64,
    peak: std::sync::Mutex<Option<(Duration, Instant)>>,
}

impl ClaimLatency {
    pub(super) fn observe(&self, latency: Duration) {
        let sample = u64::try_from(latency.as_micros()).unwrap_or(u64::MAX);
        let old = self.average_us.load(Ordering::Relaxed);
        self.average_us
            .store(old - old / 8 + sample / 8, Ordering::Relaxed);
        let now = Instant::now();
        let mut peak = self.peak.lock().unwrap_or_else(PoisonError::into_inner);
        if latency >= decayed(*peak, now) {
            *peak = Some((latency, now));
        }
    }

    /// The moving average, in ms.
    pub(super) fn ms(&self) -> u64 {
        self.average_us.load(Ordering::Relaxed) / 1000
    }

    /// How far ahead of a tick the preferred replica wakes and claims it:
    /// one and a half times the slowest recent claim, within [`MIN_LEAD`]
    /// and [`MAX_LEAD`]. Claiming ahead starts nothing early (`claim.lua`).
    pub(super) fn lead(&self) -> Duration {
        let peak = *self.peak.lock().unwrap_or_else(PoisonError::into_inner);
        decayed(peak, Instant::now())
            .mul_f64(1.5)
            .clamp(MIN_LEAD, MAX_LEAD)
    }
}

/// A peak `(value, when)` as it weighs at `now`.
fn decayed(peak: Option<(Duration, Instant)>, now: Instant) -> Duration {
    peak.map_or(Duration::ZERO, |(value, when)| {
        let half_lives =
            now.saturating_duration_since(when).as_secs_f64() / PEAK_HALF_LIFE.as_secs_f64();
        value.mul_f64(0.5f64.powf(half_lives))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lead_follows_the_slowest_recent_claim_within_its_bounds() {
        let latency = ClaimLatency::default();
        assert_eq!(latency.lead(), MIN_LEAD, "no claim measured yet");
        latency.observe(Duration::from_micros(300));
        assert_eq!(latency.lead(), MIN_LEAD, "a quiet machine's claim");
        // A burst: the slowest claim sets the lead, not the average.
        for ms in 1..=20 {
            latency.observe(Duration::from_millis(ms));
        }
        let lead = latency.lead();
        assert!(
            (Duration::from_millis(29)..=Duration::from_millis(30)).contains(&lead),
            "one and a half times the slowest claim of 20 ms: {lead:?}"
        );
        assert!(latency.ms() < 20, "the average is not the peak");
        latency.observe(Duration::from_secs(2));
        assert_eq!(latency.lead(), MAX_LEAD, "never more than the bound");
    }

    #[test]
    fn a_slow_claim_weighs_half_as_much_after_a_half_life() {
        let start = Instant::now();
        let peak = Some((Duration::from_millis(100), start));
        assert_eq!(decayed(peak, start), Duration::from_millis(100));
        let later = decayed(peak, start + PEAK_HALF_LIFE);
        assert!(
            (Duration::from_millis(49)..=Duration::from_millis(51)).contains(&later),
            "{later:?}"
        );
        assert_eq!(decayed(None, start), Duration::ZERO);
    }
}
