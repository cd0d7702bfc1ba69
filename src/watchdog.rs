//! Keeps this replica's leases alive, and stops any run whose lease it can no
//! longer prove.
//!
//! The watchdog's table holds the runs in flight (their lease keys and the
//! channels that stop them). A run is held and released in it directly,
//! under a `std` mutex never held across an `.await`: no message and no
//! wait on the watchdog's task per run (two messages and an answer per run
//! were a share of a busy replica's context switches). Every `lease / 3`
//! the task renews all leases in one pipeline. A renewal that says the
//! lease is no longer ours stops that run at once (`lost_lease`), unless the
//! run was released meanwhile (its finish deletes the lease). When Redis
//! does not answer, it keeps retrying, and when a run's local deadline —
//! the monotonic instant its last successful renewal was *sent*, plus the
//! lease, minus a safety margin — passes, it stops the run: by then the
//! lease may have lapsed in Redis and another replica may hold the tick.

use crate::membership::RunInFlight;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::{Notify, watch};
use tokio::time::{Instant, sleep_until};
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, warn};

use crate::store::{Renewal, Store};
use crate::task::Stop;
use crate::telemetry;

/// One run the watchdog keeps alive.
#[derive(Debug)]
pub struct LeaseHold {
    pub job: String,
    pub run_id: String,
    pub tick_ms: i64,
    pub fence: u64,
    pub lease_key: String,
    /// This replica, for log lines.
    pub replica: String,
    /// When the claim that created the lease was sent: the lease is valid for
    /// at least `lease` from then.
    pub valid_from: Instant,
    pub stop: watch::Sender<Option<Stop>>,
}

/// The daemon's side of the watchdog, cheap to clone.
#[derive(Clone)]
pub struct Handle {
    shared: Arc<Shared>,
}

/// What the handles and the task share.
struct Shared {
    table: Mutex<Table>,
    lease: Duration,
    /// Wakes the task to plan again: a run due before it meant to wake.
    wake: Notify,
}

impl Shared {
    fn table(&self) -> MutexGuard<'_, Table> {
        // Every change to the table is made whole under the lock: a panic
        // elsewhere while it was held leaves nothing half-done.
        self.table.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Handle {
    /// Keeps `hold`'s lease alive from now on, until [`Handle::release`].
    pub fn hold(&self, hold: LeaseHold) {
        let lease = self.shared.lease;
        let deadline = hold.valid_from + lease - lease / MARGIN_DIVISOR;
        let mut table = self.shared.table();
        table.hold(hold, deadline);
        count_held(&table);
        if table.wake_at.is_none_or(|wake_at| deadline < wake_at) {
            self.shared.wake.notify_one();
        }
    }

    /// The run ended: its lease is renewed no more, and a renewal already
    /// on its way that finds the lease gone (the finish deletes it) is not
    /// taken for a loss.
    pub fn release(&self, run_id: &str) {
        let mut table = self.shared.table();
        table.release(run_id);
        count_held(&table);
    }

    /// Stops every run (the shutdown grace is over).
    pub fn stop_all(&self, reason: Stop) {
        for h in self.shared.table().values() {
            let _ = h.hold.stop.send(Some(reason));
        }
    }

    /// The runs in flight.
    pub fn list(&self) -> Vec<RunInFlight> {
        self.shared
            .table()
            .values()
            .map(|h| RunInFlight {
                job: h.hold.job.clone(),
                run_id: h.hold.run_id.clone(),
                tick_ms: h.hold.tick_ms,
                fence: h.hold.fence,
            })
            .collect()
    }
}

/// Fraction of the lease kept as a safety margin before the local deadline.
const MARGIN_DIVISOR: u32 = 5;

struct Held {
    hold: LeaseHold,
    /// Runs stop at this instant unless a renewal succeeds first.
    deadline: Instant,
    /// Tells holds with the same deadline apart in `Table::deadlines`.
    number: u64,
}

/// The runs in flight by run id, and their deadlines in order: the
/// earliest is known without a look at every run (a scan of the map on
/// each message was 15 % of a replica's CPU at 10,000 runs a second).
#[derive(Default)]
struct Table {
    runs: HashMap<String, Held>,
    deadlines: BTreeMap<(Instant, u64), String>,
    numbered: u64,
    /// When the task next wakes by itself; `None` until it first plans.
    wake_at: Option<Instant>,
}

impl Table {
    fn hold(&mut self, hold: LeaseHold, deadline: Instant) {
        self.release(&hold.run_id);
        self.numbered += 1;
        let number = self.numbered;
        self.deadlines
            .insert((deadline, number), hold.run_id.clone());
        let held = Held {
            hold,
            deadline,
            number,
        };
        self.runs.insert(held.hold.run_id.clone(), held);
    }

    fn release(&mut self, run_id: &str) -> Option<Held> {
        let held = self.runs.remove(run_id)?;
        self.deadlines.remove(&(held.deadline, held.number));
        Some(held)
    }

    /// Moves `run_id`'s deadline to `deadline` (after a renewal).
    fn extend(&mut self, run_id: &str, deadline: Instant) {
        let Some(held) = self.runs.get_mut(run_id) else {
            return;
        };
        if let Some(run_id) = self.deadlines.remove(&(held.deadline, held.number)) {
            self.deadlines.insert((deadline, held.number), run_id);
        }
        held.deadline = deadline;
    }

    fn earliest_deadline(&self) -> Option<Instant> {
        self.deadlines
            .first_key_value()
            .map(|((deadline, _), _)| *deadline)
    }

    /// A run whose deadline is `now` or earlier, taken off the table.
    fn pop_expired(&mut self, now: Instant) -> Option<Held> {
        let ((deadline, _), _) = self.deadlines.first_key_value()?;
        if *deadline > now {
            return None;
        }
        let (_, run_id) = self.deadlines.pop_first()?;
        self.runs.remove(&run_id)
    }

    fn len(&self) -> usize {
        self.runs.len()
    }

    fn is_empty(&self) -> bool {
        self.runs.is_empty()
    }

    fn values(&self) -> impl Iterator<Item = &Held> {
        self.runs.values()
    }
}

/// Sets the gauge of leases held. Looked up each time, not kept: a
/// recorder installed after the watchdog was made still gets it.
fn count_held(table: &Table) {
    metrics::gauge!(telemetry::LEASES_HELD).set(table.len() as f64);
}

/// Creates the watchdog; run the returned future until `cancel`.
pub fn new(
    store: Store,
    lease: Duration,
    cancel: CancellationToken,
) -> (Handle, impl Future<Output = ()>) {
    let shared = Arc::new(Shared {
        table: Mutex::new(Table::default()),
        lease,
        wake: Notify::new(),
    });
    (
        Handle {
            shared: shared.clone(),
        },
        run(shared, store, cancel),
    )
}

async fn run(shared: Arc<Shared>, store: Store, cancel: CancellationToken) {
    let lease = shared.lease;
    let period = lease / 3;
    let mut next_renewal = Instant::now() + period;
    loop {
        let wake = {
            let mut table = shared.table();
            let wake = table
                .earliest_deadline()
                .map_or(next_renewal, |d| d.min(next_renewal));
            table.wake_at = Some(wake);
            wake
        };
        tokio::select! {
            () = cancel.cancelled() => return,
            // A run held since: plan again.
            () = shared.wake.notified() => {}
            () = sleep_until(wake) => {
                let now = Instant::now();
                // A stalled process (SIGSTOP, a long pause) wakes up here late:
                // check deadlines before trusting any renewal.
                expire(&shared, now);
                if now >= next_renewal {
                    // After a failure, retry sooner than the period.
                    next_renewal = if renew(&store, &shared).await {
                        now + period
                    } else {
                        now + (period / 2).min(Duration::from_secs(1))
                    };
                }
            }
        }
    }
}

/// Stops every run whose local deadline has passed.
fn expire(shared: &Shared, now: Instant) {
    let mut held = shared.table();
    while let Some(h) = held.pop_expired(now) {
        error!(
            job = %h.hold.job, run_id = %h.hold.run_id, tick_ms = h.hold.tick_ms, fence = h.hold.fence,
            replica = %h.hold.replica, "lease could not be renewed before its deadline; stopping the run"
        );
        metrics::counter!(telemetry::LOST_LEASES, "job" => h.hold.job.clone()).increment(1);
        let _ = h.hold.stop.send(Some(Stop::LostLease));
    }
    count_held(&held);
}

/// Renews all leases in one pipeline; false when Redis did not answer.
async fn renew(store: &Store, shared: &Shared) -> bool {
    let lease = shared.lease;
    let sent = Instant::now();
    let renewals: Vec<Renewal> = {
        let held = shared.table();
        if held.is_empty() {
            return true;
        }
        held.values()
            .map(|h| Renewal {
                job: h.hold.job.clone(),
                run_id: h.hold.run_id.clone(),
                lease_key: h.hold.lease_key.clone(),
            })
            .collect()
    };
    let answer = store.renew(&renewals, lease).await;
    // Runs released while the renewal was on its way are no longer in the
    // table: what Redis said of them is moot.
    let mut held = shared.table();
    match answer {
        Ok(results) => {
            let margin = lease / MARGIN_DIVISOR;
            for (renewal, ours) in renewals.iter().zip(results) {
                if ours {
                    held.extend(&renewal.run_id, sent + lease - margin);
                    metrics::counter!(telemetry::LEASE_RENEWALS, "result" => "ok").increment(1);
                    debug!(job = %renewal.job, run_id = %renewal.run_id, "lease renewed");
                } else if let Some(h) = held.release(&renewal.run_id) {
                    metrics::counter!(telemetry::LEASE_RENEWALS, "result" => "lost").increment(1);
                    metrics::counter!(telemetry::LOST_LEASES, "job" => h.hold.job.clone())
                        .increment(1);
                    error!(
                        job = %h.hold.job, run_id = %h.hold.run_id, tick_ms = h.hold.tick_ms, fence = h.hold.fence,
                        replica = %h.hold.replica, "lease is no longer ours; killing the run"
                    );
                    let _ = h.hold.stop.send(Some(Stop::LostLease));
                }
            }
            count_held(&held);
            true
        }
        Err(e) => {
            metrics::counter!(telemetry::LEASE_RENEWALS, "result" => "error")
                .increment(renewals.len() as u64);
            metrics::counter!(telemetry::REDIS_ERRORS).increment(1);
            for h in held.values() {
                warn!(
                    job = %h.hold.job, run_id = %h.hold.run_id, tick_ms = h.hold.tick_ms, fence = h.hold.fence,
                    replica = %h.hold.replica, error = %e, "cannot renew the lease; retrying"
                );
            }
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hold(run_id: &str) -> LeaseHold {
        LeaseHold {
            job: "job".to_string(),
            run_id: run_id.to_string(),
            tick_ms: 0,
            fence: 1,
            lease_key: format!("lease:{run_id}"),
            replica: "r".to_string(),
            valid_from: Instant::now(),
            stop: watch::channel(None).0,
        }
    }

    fn expired(table: &mut Table, now: Instant) -> Vec<String> {
        std::iter::from_fn(|| table.pop_expired(now))
            .map(|h| h.hold.run_id)
            .collect()
    }

    #[test]
    fn runs_expire_in_deadline_order_and_a_released_one_never() {
        let t0 = Instant::now();
        let s = Duration::from_secs(1);
        let mut table = Table::default();
        table.hold(hold("late"), t0 + 3 * s);
        table.hold(hold("early"), t0 + s);
        table.hold(hold("same"), t0 + s);
        table.hold(hold("gone"), t0);
        assert_eq!(table.release("gone").map(|h| h.number), Some(4));
        assert_eq!(table.earliest_deadline(), Some(t0 + s));
        assert!(expired(&mut table, t0).is_empty());
        assert_eq!(expired(&mut table, t0 + 2 * s), ["early", "same"]);
        assert_eq!(table.len(), 1);
        assert_eq!(table.earliest_deadline(), Some(t0 + 3 * s));
    }

    #[test]
    fn a_renewal_moves_the_deadline_and_a_second_hold_replaces_the_first() {
        let t0 = Instant::now();
        let s = Duration::from_secs(1);
        let mut table = Table::default();
        table.hold(hold("a"), t0 + s);
        table.hold(hold("b"), t0 + 2 * s);
        table.extend("a", t0 + 5 * s);
        table.extend("unknown", t0);
        assert_eq!(table.earliest_deadline(), Some(t0 + 2 * s));
        table.hold(hold("b"), t0 + 6 * s);
        assert_eq!(table.len(), 2);
        assert_eq!(table.deadlines.len(), 2);
        assert_eq!(expired(&mut table, t0 + 5 * s), ["a"]);
        assert_eq!(expired(&mut table, t0 + 6 * s), ["b"]);
        assert!(table.is_empty());
        assert_eq!(table.earliest_deadline(), None);
    }
}
