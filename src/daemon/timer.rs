//! The replica's one timer for all its jobs. A job between two ticks is
//! not a task but an [`Alarm`] in one heap (about 80 bytes: when, the job,
//! its cancellation and what to do then), and one task, [`ring`], sleeps
//! until the earliest alarm. A due alarm goes first to `tick::on_alarm`: a
//! replica that is not the tick's preferred one waits for its rendezvous
//! turn as another alarm, and a tick whose claim another replica
//! announced by then ends there, with the job's next alarm. The rest get
//! a short task each (`tick::job_step`: claim the tick and act on the
//! claim, or catch up), which sets the job's next alarm and ends. A task
//! per idle job was most of an idle replica's memory (README "Benchmark",
//! idle); a task per due alarm, waiting for its turn, was most of a busy
//! replica's at the instant 10,000 jobs were due.
//!
//! Catching up (at start, after a stall or a late claim) reads the job's
//! state and sweeps: at most [`CATCHING_UP`] jobs do it at once, and the
//! others wait their turn as alarms in a queue, not as tasks, so 100,000
//! jobs starting together cost 100,000 alarms, not 100,000 tasks.

use super::{CATCHING_UP, Ctx, tick};
use crate::config::Job;
use std::sync::Arc;
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio::time::sleep_until;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use std::collections::{BinaryHeap, VecDeque};
use std::sync::Mutex;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::tick::{Step, job_step};

/// One job's next wake-up.
pub(super) struct Alarm {
    /// When it is due.
    pub(super) at: Instant,
    pub(super) job: Arc<Job>,
    /// The job's cancellation (a reload that removes or changes it, or
    /// shutdown): a cancelled alarm is dropped.
    pub(super) cancel: CancellationToken,
    /// What the job does when the alarm rings.
    pub(super) step: Step,
}

// Ordered by `at` only, the earliest greatest: `BinaryHeap` is a max-heap.
impl Ord for Alarm {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        other.at.cmp(&self.at)
    }
}

impl PartialOrd for Alarm {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Alarm {
    fn eq(&self, other: &Self) -> bool {
        self.at == other.at
    }
}

impl Eq for Alarm {}

/// Every job's alarm (jobs in a step have none until the step ends).
#[derive(Default)]
pub(super) struct Timer {
    /// Never held across an `.await`.
    alarms: Mutex<BinaryHeap<Alarm>>,
    /// Wakes [`ring`] when an alarm earlier than all others was set.
    earlier: Notify,
}

impl Timer {
    fn alarms(&self) -> std::sync::MutexGuard<'_, BinaryHeap<Alarm>> {
        // Nothing panics while holding it; a poisoned heap is still whole.
        self.alarms
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Sets `alarm`.
    pub(super) fn set(&self, alarm: Alarm) {
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

    /// When the earliest alarm is due.
    fn next_at(&self) -> Option<Instant> {
        self.alarms().peek().map(|alarm| alarm.at)
    }

    /// The alarms due at `now`, taken off the heap.
    fn take_due(&self, now: Instant) -> Vec<Alarm> {
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

/// The timer's task, until `claiming` is cancelled: starts each due
/// alarm's step as a task in `steps`, catch-ups [`CATCHING_UP`] at a time.
pub(super) async fn ring(ctx: Arc<Ctx>, steps: TaskTracker, claiming: CancellationToken) {
    let turns = Arc::new(Semaphore::new(CATCHING_UP));
    let mut waiting: VecDeque<Alarm> = VecDeque::new();
    loop {
        // Registered before the heap is read: an earlier alarm set in
        // between wakes it (`notify_one` keeps a permit besides).
        let earlier = ctx.timer.earlier.notified();
        let next_at = ctx.timer.next_at();
        // Due alarms first: catch-ups that finish quickly hand their turn
        // on at once, and must not keep the ticks of caught-up jobs waiting.
        tokio::select! {
            biased;
            () = claiming.cancelled() => return,
            () = sleep_until_some(next_at) => {
                for alarm in ctx.timer.take_due(Instant::now()) {
                    match alarm.step {
                        Step::CatchUp => waiting.push_back(alarm),
                        Step::Tick { .. } | Step::Turn { .. } => start(&ctx, &steps, alarm, None),
                    }
                }
            }
            turn = turns.clone().acquire_owned(), if !waiting.is_empty() => {
                // The semaphore is never closed.
                let Ok(turn) = turn else { continue };
                if let Some(alarm) = waiting.pop_front() {
                    start(&ctx, &steps, alarm, Some(turn));
                }
            }
            () = earlier => {}
        }
    }
}

/// Starts `alarm`'s step (unless its job was cancelled meanwhile); the step
/// sets the job's next alarm when it ends.
fn start(ctx: &Arc<Ctx>, steps: &TaskTracker, alarm: Alarm, turn: Option<OwnedSemaphorePermit>) {
    if alarm.cancel.is_cancelled() {
        return;
    }
    let Some(alarm) = tick::on_alarm(ctx, alarm) else {
        return;
    };
    let ctx = ctx.clone();
    steps.spawn(async move {
        let Alarm {
            at,
            job,
            cancel,
            step,
        } = alarm;
        if let Some((at, step)) = job_step(&ctx, &job, &cancel, at, step, turn).await {
            ctx.timer.set(Alarm {
                at,
                job,
                cancel,
                step,
            });
        }
    });
}

/// Sleeps until `at`, or forever without one.
async fn sleep_until_some(at: Option<Instant>) {
    match at {
        Some(at) => sleep_until(at).await,
        None => std::future::pending().await,
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

    fn alarm(at: Instant, cancel: &CancellationToken) -> Alarm {
        Alarm {
            at,
            job: job(),
            cancel: cancel.clone(),
            step: Step::CatchUp,
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
        timer.earlier.notified().await;
        timer.set(alarm(now + Duration::from_millis(20), &cancel));
        let later = timeout(Duration::from_millis(1), timer.earlier.notified()).await;
        assert!(later.is_err(), "a later alarm woke the timer");
        timer.set(alarm(now + Duration::from_millis(1), &cancel));
        let earlier = timeout(Duration::from_millis(1), timer.earlier.notified()).await;
        assert!(earlier.is_ok(), "an earlier alarm did not wake the timer");
    }
}
