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
use std::collections::HashMap;
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
    let mut held: HashMap<String, Held> = HashMap::new();
    let mut next_renewal = Instant::now() + period;
    loop {
        let earliest_deadline = held.values().map(|h| h.deadline).min();
        let wake = earliest_deadline.map_or(next_renewal, |d| d.min(next_renewal));
        tokio::select! {
            () = cancel.cancelled() => return,
            command = rx.recv() => match command {
                None => return,
                Some(Command::Hold(hold)) => {
                    let deadline = hold.valid_from + lease - margin;
                    held.insert(hold.run_id.clone(), Held { hold, deadline });
                    metrics::gauge!(telemetry::LEASES_HELD).set(held.len() as f64);
                }
                Some(Command::Release { run_id, done }) => {
                    held.remove(&run_id);
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
fn expire(held: &mut HashMap<String, Held>, now: Instant) {
    held.retain(|_, h| {
        if now < h.deadline {
            return true;
        }
        error!(
            job = %h.hold.job, run_id = %h.hold.run_id, tick_ms = h.hold.tick_ms, fence = h.hold.fence,
            replica = %h.hold.replica, "lease could not be renewed before its deadline; stopping the run"
        );
        metrics::counter!(telemetry::LOST_LEASES, "job" => h.hold.job.clone()).increment(1);
        let _ = h.hold.stop.send(Some(Stop::LostLease));
        false
    });
}

/// Renews all leases in one pipeline; false when Redis did not answer.
async fn renew(store: &Store, lease: Duration, held: &mut HashMap<String, Held>) -> bool {
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
                    if let Some(h) = held.get_mut(&renewal.run_id) {
                        h.deadline = sent + lease - margin;
                    }
                    metrics::counter!(telemetry::LEASE_RENEWALS, "result" => "ok").increment(1);
                    debug!(job = %renewal.job, run_id = %renewal.run_id, "lease renewed");
                } else if let Some(h) = held.remove(&renewal.run_id) {
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
