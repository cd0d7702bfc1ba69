//! The replica's one timer for all its jobs. A job between two ticks is
//! not a task but an [`Alarm`] in one heap (about 80 bytes: when, the job,
//! its cancellation and what to do then); one task (`tick::ring`) sleeps
//! until the earliest alarm and acts on it. The timer knows when alarms
//! are due and nothing of what they do: `S`, the step, is the caller's.
//! An idle job costs an alarm, not a task and its stack of futures.

use crate::config::Job;
use std::collections::BinaryHeap;
use std::sync::Arc;
use std::sync::Mutex;
use tokio::sync::Notify;
use tokio::sync::futures::Notified;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// One job's next wake-up, and what it does then (`S`).
pub(super) struct Alarm<S> {
    /// When it is due.
    pub(super) at: Instant,
    pub(super) job: Arc<Job>,
    /// The job's cancellation (a reload that removes or changes it, or
    /// shutdown): a cancelled alarm is dropped.
    pub(super) cancel: CancellationToken,
    /// What the job does when the alarm rings.
    pub(super) step: S,
}

// Ordered by `at` only, the earliest greatest: `BinaryHeap` is a max-heap.
impl<S> Ord for Alarm<S> {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        other.at.cmp(&self.at)
    }
}

impl<S> PartialOrd for Alarm<S> {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl<S> PartialEq for Alarm<S> {
    fn eq(&self, other: &Self) -> bool {
        self.at == other.at
    }
}

impl<S> Eq for Alarm<S> {}

/// Every job's alarm (jobs in a step have none until the step ends).
pub(super) struct Timer<S> {
    /// Never held across an `.await`.
    alarms: Mutex<BinaryHeap<Alarm<S>>>,
    /// Wakes the timer's task when an alarm earlier than all others was
    /// set.
    earlier: Notify,
}

impl<S> Default for Timer<S> {
    fn default() -> Self {
        Timer {
            alarms: Mutex::new(BinaryHeap::new()),
            earlier: Notify::new(),
        }
    }
}

impl<S> Timer<S> {
    fn alarms(&self) -> std::sync::MutexGuard<'_, BinaryHeap<Alarm<S>>> {
        // Nothing panics while holding it; a poisoned heap is still whole.
        self.alarms
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Sets `alarm`.
    pub(super) fn set(&self, alarm: Alarm<S>) {
        let at = alarm.at;
        let earliest = {
            let mut alarms = self.alarms();
            let earliest = alarms.peek().is_none_or(|first| at < first.at);
            alarms.push(alarm);
            earliest
        };
        if earliest {
            self.earlier.notify_one();
        }
    }

    /// Drops the alarms of cancelled jobs (after a reload), so their
    /// definitions are not held until their next tick.
    pub(super) fn forget_cancelled(&self) {
        self.alarms().retain(|alarm| !alarm.cancel.is_cancelled());
    }

    /// Completes when an alarm earlier than all others is set after this
    /// call (or was since the last one completed): take it before reading
    /// [`Timer::next_at`], so that none set in between is missed.
    pub(super) fn earlier(&self) -> Notified<'_> {
        self.earlier.notified()
    }

    /// When the earliest alarm is due.
    pub(super) fn next_at(&self) -> Option<Instant> {
        self.alarms().peek().map(|alarm| alarm.at)
    }

    /// The alarms due at `now`, taken off the heap.
    pub(super) fn take_due(&self, now: Instant) -> Vec<Alarm<S>> {
        let mut alarms = self.alarms();
        let mut due = Vec::new();
        while alarms.peek().is_some_and(|alarm| alarm.at <= now) {
            due.extend(alarms.pop());
        }
        due
    }

    /// How many alarms are set.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.alarms().len()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::config::Config;
    use tokio::time::timeout;

    fn job() -> Arc<Job> {
        let config = Config::parse(
            "[redis]\nurl = \"redis://127.0.0.1:1\"\n[jobs.a]\nschedule = \"* * * * *\"\ncommand = [\"true\"]\n",
            std::path::Path::new("t.toml"),
        )
        .expect("a valid config");
        Arc::new(config.jobs.into_values().next().expect("one job"))
    }

    fn alarm(at: Instant, cancel: &CancellationToken) -> Alarm<()> {
        Alarm {
            at,
            job: job(),
            cancel: cancel.clone(),
            step: (),
        }
    }

    #[tokio::test]
    async fn alarms_come_due_earliest_first_and_cancelled_ones_are_forgotten() {
        let timer = Timer::default();
        let now = Instant::now();
        let (kept, dropped) = (CancellationToken::new(), CancellationToken::new());
        for ms in [30, 10, 20] {
            timer.set(alarm(now + Duration::from_millis(ms), &kept));
        }
        timer.set(alarm(now + Duration::from_millis(5), &dropped));
        assert_eq!(timer.next_at(), Some(now + Duration::from_millis(5)));
        dropped.cancel();
        timer.forget_cancelled();
        assert_eq!(timer.len(), 3);
        assert_eq!(timer.next_at(), Some(now + Duration::from_millis(10)));
        let due = timer.take_due(now + Duration::from_millis(20));
        let ats: Vec<Instant> = due.iter().map(|alarm| alarm.at).collect();
        assert_eq!(
            ats,
            [
                now + Duration::from_millis(10),
                now + Duration::from_millis(20)
            ]
        );
        assert_eq!(timer.len(), 1);
    }

    #[tokio::test]
    async fn an_earlier_alarm_wakes_the_timer_and_a_later_one_does_not() {
        let timer = Timer::default();
        let now = Instant::now();
        let cancel = CancellationToken::new();
        timer.set(alarm(now + Duration::from_millis(10), &cancel));
        // The first alarm left a permit: take it.
        timer.earlier().await;
        timer.set(alarm(now + Duration::from_millis(20), &cancel));
        let later = timeout(Duration::from_millis(1), timer.earlier()).await;
        assert!(later.is_err(), "a later alarm woke the timer");
        timer.set(alarm(now + Duration::from_millis(1), &cancel));
        let earlier = timeout(Duration::from_millis(1), timer.earlier()).await;
        assert!(earlier.is_ok(), "an earlier alarm did not wake the timer");
    }
}
