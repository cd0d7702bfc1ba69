//! Keeps this replica's leases alive, and stops any run whose lease it can no
//! longer prove.
//!
//! The watchdog owns the table of runs in flight (their lease keys and the
//! channels that stop them); the daemon tells it about runs with messages.
//! Every `lease / 3` it renews all leases in one pipeline. A renewal that says
//! the lease is no longer ours stops that run at once (`lost_lease`). When
//! Redis does not answer, it keeps retrying, and when a run's local deadline —
//! the monotonic instant its last successful renewal was *sent*, plus the
//! lease, minus a safety margin — passes, it stops the run: by then the lease
//! may have lapsed in Redis and another replica may hold the tick.

use crate::membership::RunInFlight;
use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot, watch};
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

/// What the daemon can ask of the watchdog.
#[derive(Debug)]
pub enum Command {
    Hold(LeaseHold),
    /// The run ended; `done` is answered once its lease is no longer renewed.
    Release {
        run_id: String,
        done: oneshot::Sender<()>,
    },
    /// Stop every run (shutdown grace is over).
    StopAll(Stop),
    List(oneshot::Sender<Vec<RunInFlight>>),
}

/// The sending half, cheap to clone.
#[derive(Debug, Clone)]
pub struct Handle {
    tx: mpsc::UnboundedSender<Command>,
}

impl Handle {
    /// Sends a command; if the watchdog is gone (shutdown is complete) there
    /// is nothing left to renew, so the command is moot.
    pub fn send(&self, command: Command) {
        let _ = self.tx.send(command);
    }

    /// The runs in flight.
    pub async fn list(&self) -> Vec<RunInFlight> {
        let (tx, rx) = oneshot::channel();
        self.send(Command::List(tx));
        rx.await.unwrap_or_default()
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
        self.deadlines.first_key_value().map(|((deadline, _), _)| *deadline)
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

/// Creates the watchdog; run the returned future until `cancel`.
pub fn new(
    store: Store,
    lease: Duration,
    cancel: CancellationToken,
) -> (Handle, impl Future<Output = ()>) {
    let (tx, rx) = mpsc::unbounded_channel();
    (Handle { tx }, run(store, lease, rx, cancel))
}

async fn run(
    store: Store,
    lease: Duration,
    mut rx: mpsc::UnboundedReceiver<Command>,
    cancel: CancellationToken,
) {
    let period = lease / 3;
    let margin = lease / MARGIN_DIVISOR;
    let mut held = Table::default();
    let mut next_renewal = Instant::now() + period;
    loop {
        let earliest_deadline = held.earliest_deadline();
        let wake = earliest_deadline.map_or(next_renewal, |d| d.min(next_renewal));
        tokio::select! {
            () = cancel.cancelled() => return,
            command = rx.recv() => match command {
                None => return,
                Some(Command::Hold(hold)) => {
                    let deadline = hold.valid_from + lease - margin;
                    held.hold(hold, deadline);
                    metrics::gauge!(telemetry::LEASES_HELD).set(held.len() as f64);
                }
                Some(Command::Release { run_id, done }) => {
                    held.release(&run_id);
                    metrics::gauge!(telemetry::LEASES_HELD).set(held.len() as f64);
                    let _ = done.send(());
                }
                Some(Command::StopAll(reason)) => {
                    for h in held.values() {
                        let _ = h.hold.stop.send(Some(reason));
                    }
                }
                Some(Command::List(reply)) => {
                    let runs = held.values().map(|h| RunInFlight {
                        job: h.hold.job.clone(),
                        run_id: h.hold.run_id.clone(),
                        tick_ms: h.hold.tick_ms,
                        fence: h.hold.fence,
                    }).collect();
                    let _ = reply.send(runs);
                }
            },
            () = sleep_until(wake) => {
                let now = Instant::now();
                // A stalled process (SIGSTOP, a long pause) wakes up here late:
                // check deadlines before trusting any renewal.
                expire(&mut held, now);
                if now >= next_renewal {
                    // After a failure, retry sooner than the period.
                    next_renewal = if renew(&store, lease, &mut held).await {
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
fn expire(held: &mut Table, now: Instant) {
    while let Some(h) = held.pop_expired(now) {
        error!(
            job = %h.hold.job, run_id = %h.hold.run_id, tick_ms = h.hold.tick_ms, fence = h.hold.fence,
            replica = %h.hold.replica, "lease could not be renewed before its deadline; stopping the run"
        );
        metrics::counter!(telemetry::LOST_LEASES, "job" => h.hold.job.clone()).increment(1);
        let _ = h.hold.stop.send(Some(Stop::LostLease));
    }
}

/// Renews all leases in one pipeline; false when Redis did not answer.
async fn renew(store: &Store, lease: Duration, held: &mut Table) -> bool {
    if held.is_empty() {
        return true;
    }
    let sent = Instant::now();
    let renewals: Vec<Renewal> = held
        .values()
        .map(|h| Renewal {
            job: h.hold.job.clone(),
            run_id: h.hold.run_id.clone(),
            lease_key: h.hold.lease_key.clone(),
        })
        .collect();
    match store.renew(&renewals, lease).await {
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
