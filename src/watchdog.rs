//! Keeps this replica's run leases alive, and stops any run whose lease it
//! can no longer prove: the daemon's user of the [lease keeper](crate::lease).
//!
//! A run is held in the keeper's table when it starts and released when
//! it ends, directly, without a message to the keeper's task. The keeper
//! renews the runs' leases (all due together, since they share the
//! daemon's lease) in one pipeline with `Store::renew`, and stops a run
//! with [`Stop::LostLease`] when a renewal says its lease is no longer
//! ours or when its local deadline passes first. The daemon runs the
//! keeper's task until its service token is cancelled, stops every run at
//! the end of the shutdown grace ([`Handle::stop_all`]), and lists the
//! runs in flight for its heartbeat ([`Handle::list`]).

use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, warn};

use crate::lease::{self, Event, Keeper, Leases};
use crate::membership::RunInFlight;
use crate::store::{Renewal, Renewed, Store, StoreError};
use crate::task::Stop;
use crate::telemetry;

pub use crate::lease::HoldId;

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
    keeper: Keeper<Runs>,
}

impl Handle {
    /// Keeps `hold`'s lease alive from now on, until [`Handle::release`].
    pub fn hold(&self, hold: LeaseHold) -> HoldId {
        let valid_from = hold.valid_from;
        self.keeper.hold(hold, self.keeper.user().lease, valid_from)
    }

    /// The run ended: its lease is renewed no more, and a renewal already
    /// on its way that finds the lease gone (the finish deletes it) is not
    /// taken for a loss.
    pub fn release(&self, id: HoldId) {
        self.keeper.release(id);
    }

    /// Stops every run (the shutdown grace is over).
    pub fn stop_all(&self, reason: Stop) {
        self.keeper.map_holds(|h| {
            let _ = h.stop.send(Some(reason));
        });
    }

    /// Stops the run `run_id` with [`Stop::Killed`] if this replica holds
    /// it (an operator asked, `cronlease kill`); whether it does.
    pub fn kill(&self, run_id: &str) -> bool {
        let found = self.keeper.map_holds(|h| {
            if h.run_id == run_id {
                ask_kill(h);
                true
            } else {
                false
            }
        });
        found.contains(&true)
    }

    /// The runs in flight.
    pub fn list(&self) -> Vec<RunInFlight> {
        self.keeper.map_holds(|h| RunInFlight {
            job: h.job.clone(),
            run_id: h.run_id.clone(),
            tick_ms: h.tick_ms,
            fence: h.fence,
        })
    }
}

/// Tells `hold`'s run to stop with [`Stop::Killed`], once: a run told
/// to stop already (a kill asked before, a lost lease, a timeout) is left
/// to that stop.
fn ask_kill(hold: &LeaseHold) {
    let first = hold.stop.send_if_modified(|stop| {
        if stop.is_some() {
            return false;
        }
        *stop = Some(Stop::Killed);
        true
    });
    if first {
        tracing::warn!(job = %hold.job, run_id = %hold.run_id, replica = %hold.replica, "an operator asked for the run to stop; stopping it");
    }
}

/// The runs' side of the keeper: one lease for all, renewed with the
/// renew script.
struct Runs {
    store: Store,
    lease: Duration,
}

impl Leases for Runs {
    type Hold = LeaseHold;
    type Renewal = Renewal;

    fn renewal(&self, hold: &LeaseHold, _lease: Duration) -> Renewal {
        Renewal {
            job: hold.job.clone(),
            run_id: hold.run_id.clone(),
            lease_key: hold.lease_key.clone(),
        }
    }

    async fn renew(&self, renewals: &[Renewal]) -> Result<Vec<Renewed>, StoreError> {
        self.store.renew(renewals, self.lease).await
    }

    fn lose(hold: &LeaseHold) {
        let _ = hold.stop.send(Some(Stop::LostLease));
    }

    fn kill(hold: &LeaseHold) {
        ask_kill(hold);
    }

    fn label(hold: &LeaseHold) -> String {
        hold.job.clone()
    }

    fn log(h: &LeaseHold, event: Event<'_>) {
        match event {
            Event::Renewed => debug!(job = %h.job, run_id = %h.run_id, "lease renewed"),
            Event::Lost => error!(
                job = %h.job, run_id = %h.run_id, tick_ms = h.tick_ms, fence = h.fence,
                replica = %h.replica, "lease is no longer ours; killing the run"
            ),
            Event::Expired => error!(
                job = %h.job, run_id = %h.run_id, tick_ms = h.tick_ms, fence = h.fence,
                replica = %h.replica, "lease could not be renewed before its deadline; stopping the run"
            ),
            Event::Retrying(e) => warn!(
                job = %h.job, run_id = %h.run_id, tick_ms = h.tick_ms, fence = h.fence,
                replica = %h.replica, error = %e, "cannot renew the lease; retrying"
            ),
        }
    }

    /// Sets the gauge of leases held. Looked up each time, not kept: a
    /// recorder installed after the watchdog was made still gets it.
    fn count_held(&self, holds: usize) {
        metrics::gauge!(telemetry::LEASES_HELD).set(holds as f64);
    }
}

/// Creates the watchdog; run the returned future until `cancel`.
pub fn new(
    store: Store,
    lease: Duration,
    cancel: CancellationToken,
) -> (Handle, impl Future<Output = ()>) {
    let keeper = lease::Keeper::new(Runs { store, lease });
    (
        Handle {
            keeper: keeper.clone(),
        },
        keeper.run(cancel),
    )
}
