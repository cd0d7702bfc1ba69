//! The replica's capacity (`[daemon] max_runs`): how many runs it has in
//! flight, whatever started them, and the most it takes. A claim takes a
//! [`RunSlot`] before it is sent and the run keeps it until its outcome
//! is recorded; a replica with no slot free makes no claim, so the
//! others take the tick at their rendezvous turn. The count is local:
//! the replica's own runs, never read from Redis.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, OnceLock};

use tokio::sync::Notify;

/// The replica's runs in flight and its limit.
pub(super) struct Capacity {
    inner: Arc<Counter>,
}

struct Counter {
    /// None: no limit.
    max: Option<u32>,
    in_flight: AtomicU32,
    /// Woken whenever a slot is given back (with a limit: without one,
    /// nobody waits).
    freed: Notify,
    /// `cronlease_runs_in_flight`, looked up at the first run (the
    /// recorder is installed after the capacity is made).
    gauge: OnceLock<metrics::Gauge>,
}

impl Counter {
    fn gauge(&self) -> &metrics::Gauge {
        self.gauge
            .get_or_init(|| metrics::gauge!(crate::telemetry::RUNS_IN_FLIGHT))
    }
}

/// One run's place in the replica's capacity, given back when dropped.
pub(super) struct RunSlot {
    counter: Arc<Counter>,
}

impl Drop for RunSlot {
    fn drop(&mut self) {
        self.counter.in_flight.fetch_sub(1, Ordering::AcqRel);
        self.counter.gauge().decrement(1.0);
        if self.counter.max.is_some() {
            self.counter.freed.notify_waiters();
        }
    }
}

impl Capacity {
    /// A capacity of `max` runs at once (None: no limit).
    pub(super) fn new(max: Option<u32>) -> Capacity {
        if let Some(max) = max {
            metrics::gauge!(crate::telemetry::RUNS_MAX).set(f64::from(max));
        }
        Capacity {
            inner: Arc::new(Counter {
                max,
                in_flight: AtomicU32::new(0),
                freed: Notify::new(),
                gauge: OnceLock::new(),
            }),
        }
    }

    /// A slot, if one is free.
    pub(super) fn try_take(&self) -> Option<RunSlot> {
        let counter = &self.inner;
        let mut n = counter.in_flight.load(Ordering::Acquire);
        loop {
            if counter.max.is_some_and(|max| n >= max) {
                return None;
            }
            match counter.in_flight.compare_exchange_weak(
                n,
                n + 1,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return Some(self.slot()),
                Err(seen) => n = seen,
            }
        }
    }

    /// A slot whether or not one is free: for a run Redis handed this
    /// replica without its asking (a rerun a finish or a sweep started),
    /// which must be counted while it lasts.
    pub(super) fn take_anyway(&self) -> RunSlot {
        self.inner.in_flight.fetch_add(1, Ordering::AcqRel);
        self.slot()
    }

    fn slot(&self) -> RunSlot {
        self.inner.gauge().increment(1.0);
        RunSlot {
            counter: self.inner.clone(),
        }
    }

    /// How many runs are in flight.
    pub(super) fn in_flight(&self) -> u32 {
        self.inner.in_flight.load(Ordering::Acquire)
    }

    /// The limit, if there is one.
    pub(super) fn max(&self) -> Option<u32> {
        self.inner.max
    }

    /// Resolves when a slot is given back after this call: the waiter is
    /// registered when this returns, before it is first polled, so a
    /// caller that takes it before looking at the count misses no slot
    /// given back in between.
    pub(super) fn freed(&self) -> tokio::sync::futures::Notified<'_> {
        self.inner.freed.notified()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_taken_up_to_the_limit_and_given_back_when_dropped() {
        let capacity = Capacity::new(Some(2));
        let a = capacity.try_take().expect("a first slot");
        let b = capacity.try_take().expect("a second slot");
        assert!(capacity.try_take().is_none());
        drop(a);
        assert_eq!(capacity.in_flight(), 1);
        let c = capacity.try_take().expect("the slot given back");
        let extra = capacity.take_anyway();
        assert_eq!(capacity.in_flight(), 3);
        drop((b, c, extra));
        assert_eq!(capacity.in_flight(), 0);
        let unlimited = Capacity::new(None);
        let many: Vec<_> = (0..100).filter_map(|_| unlimited.try_take()).collect();
        assert_eq!(many.len(), 100);
    }

    #[tokio::test]
    async fn a_slot_given_back_after_the_wait_was_taken_wakes_it_unpolled() {
        let capacity = Capacity::new(Some(1));
        let held = capacity.try_take().expect("the only slot");
        let freed = capacity.freed();
        drop(held);
        tokio::time::timeout(std::time::Duration::from_secs(5), freed)
            .await
            .expect("the wait taken before the slot came back ends");
    }
}
