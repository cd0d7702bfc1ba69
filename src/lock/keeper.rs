//! The lock keeper: one task per [`Cluster`](crate::Cluster) renews the
//! lease of every lock its guards hold, instead of a watchdog task per
//! acquisition.
//!
//! An acquisition only registers its hold in the keeper's table (a
//! `std` mutex, never held across an `.await`) and a release or a dropped
//! guard takes it out: no task is started and no message is sent per
//! acquisition. The task renews each hold every third of its own lease
//! (holds due within a sixth of it go along, so several locks share one
//! pipeline), and stops a hold (its guard's [`lost`](crate::LockGuard::lost)
//! resolves) when a renewal says the lease is no longer ours, or when its
//! local deadline passes first: the send time of its last good renewal
//! (or of its acquisition) plus the lease, less a fifth of it.
//!
//! A guard and the keeper share its [`Hold`]: the lock's names in Redis
//! and the flag behind `lost()` (an atomic and a `Notify`, set once). The
//! keeper also keeps the cluster's estimate of the Redis time
//! ([`Keeper::sync_clock`]), which dates the holders' records.
//!
//! The task is started by the first hold, on that acquisition's runtime
//! (again if that runtime has since shut down), and lives while anything
//! holds the [`Keeper`]: the `Cluster`, its clones, its builders and its
//! guards. When the last of them is dropped its token is cancelled and
//! the task ends; that is its one shutdown path.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep_until};
use tokio_util::sync::{CancellationToken, DropGuard};

use crate::clock::{RedisClock, local_now_us};
use crate::store::{LockRenewal, LockTicket, Store, StoreError};
use crate::telemetry;

/// Fraction of the lease kept as a safety margin before the local
/// deadline (the daemon's watchdog keeps the same).
const MARGIN_DIVISOR: u32 = 5;

/// The renewer of a cluster's locks; cheap to clone. The task ends when
/// the last clone is dropped.
#[derive(Clone)]
pub(crate) struct Keeper {
    shared: Arc<Shared>,
    /// Cancels the task when the last clone goes.
    _owners: Arc<DropGuard>,
}

/// What the task and the handles share.
struct Shared {
    store: Store,
    /// The Redis time as this process estimates it, for the records'
    /// `since` (see [`Keeper::sync_clock`]).
    clock: RedisClock,
    table: Mutex<Table>,
    /// Wakes the task when a hold is due before the task planned to wake.
    wake: Notify,
    cancel: CancellationToken,
    /// The lock names this process put in the registry, and when
    /// ([`Keeper::register`]). A `std` mutex: looked up and updated, never
    /// held across an `.await`.
    registered: Mutex<HashMap<String, Instant>>,
}

/// How often one process puts a lock it acquires in the registry again.
const REGISTER_EVERY: Duration = Duration::from_secs(24 * 3600);

/// The most names [`Keeper::register`] remembers; past it, it starts over
/// (a process taking a lock per customer registers each again, no more).
const REGISTERED_KEPT: usize = 10_000;

/// The holds being renewed.
#[derive(Default)]
struct Table {
    holds: HashMap<u64, Held>,
    next_id: u64,
    /// When the task next wakes by itself; `None` while it waits for holds.
    wake_at: Option<Instant>,
    task: Option<JoinHandle<()>>,
}

/// One acquisition held, shared by its guard and the keeper: its names
/// in Redis, and whether it is lost.
pub(crate) struct Hold {
    /// The lock's name and keys and the holder's token.
    pub ticket: LockTicket,
    /// Set once, by the keeper, when the lease can no longer be proven.
    lost: AtomicBool,
    /// Wakes the guard's [`Hold::lost`] waiters when `lost` is set.
    lost_wake: Notify,
}

impl Hold {
    pub(crate) fn new(ticket: LockTicket) -> Hold {
        Hold {
            ticket,
            lost: AtomicBool::new(false),
            lost_wake: Notify::new(),
        }
    }

    /// Resolves once the hold is lost; at once if it is already.
    pub(crate) async fn lost(&self) {
        loop {
            let woken = self.lost_wake.notified();
            tokio::pin!(woken);
            // Registered before the flag is read: a loss in between wakes it.
            woken.as_mut().enable();
            if self.lost.load(Ordering::Acquire) {
                return;
            }
            woken.await;
        }
    }

    /// Marks the hold lost and wakes whoever waits in [`Hold::lost`].
    fn lose(&self) {
        self.lost.store(true, Ordering::Release);
        self.lost_wake.notify_waiters();
    }
}

/// One acquisition the keeper renews.
struct Held {
    hold: Arc<Hold>,
    lease: Duration,
    fence: u64,
    next_renewal: Instant,
    /// The hold is lost at this instant unless a renewal succeeds first.
    deadline: Instant,
}

/// A lock just acquired, for [`Keeper::hold`].
pub(crate) struct NewHold {
    pub hold: Arc<Hold>,
    pub lease: Duration,
    pub fence: u64,
    /// When the acquisition was sent: the lease is valid for at least
    /// `lease` from then.
    pub valid_from: Instant,
}

/// A hold's ticket: what its guard gives back to [`Keeper::forget`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct HoldId(u64);

impl Keeper {
    /// The keeper of `store`'s locks; its task starts with the first hold.
    pub(crate) fn new(store: Store) -> Keeper {
        let cancel = CancellationToken::new();
        Keeper {
            _owners: Arc::new(cancel.clone().drop_guard()),
            shared: Arc::new(Shared {
                store,
                clock: RedisClock::new(),
                table: Mutex::new(Table::default()),
                wake: Notify::new(),
                cancel,
                registered: Mutex::new(HashMap::new()),
            }),
        }
    }

    /// The store the locks are in.
    pub(crate) fn store(&self) -> &Store {
        &self.shared.store
    }

    /// Measures the offset between this host's clock and Redis's (one
    /// `TIME`; with `quorum`, the first master's that answers), from which
    /// [`Keeper::redis_now_ms`] estimates the Redis time. Until then the
    /// estimate is the local clock.
    pub(crate) async fn sync_clock(&self) -> Result<(), StoreError> {
        let sent_us = local_now_us();
        let server_us = self.shared.store.server_time_us().await?;
        self.shared
            .clock
            .observe(server_us, sent_us, local_now_us());
        Ok(())
    }

    /// Puts lock `name`, just acquired, in the registry the dashboard
    /// lists locks from (`Store::register_lock`): at most once a day per
    /// name in this process, so that an acquisition costs nothing more.
    /// A failure is logged: the lock is held, and the registry is an index.
    pub(crate) async fn register(&self, name: &str) {
        {
            let mut registered = self
                .shared
                .registered
                .lock()
                .expect("registry mutex poisoned: a panic while updating a map");
            if registered
                .get(name)
                .is_some_and(|at| at.elapsed() < REGISTER_EVERY)
            {
                return;
            }
            if registered.len() >= REGISTERED_KEPT {
                registered.clear();
            }
            registered.insert(name.to_string(), Instant::now());
        }
        if let Err(e) = self
            .shared
            .store
            .register_lock(name, self.redis_now_ms())
            .await
        {
            tracing::debug!(lock = %name, error = %e, "cannot put the lock in the registry; tried again at its next acquisition");
            self.shared
                .registered
                .lock()
                .expect("registry mutex poisoned: a panic while updating a map")
                .remove(name);
        }
    }

    /// The Redis time now, ms, as this process estimates it: what a lock's
    /// record says it was taken `since`, without a `TIME` per acquisition.
    pub(crate) fn redis_now_ms(&self) -> i64 {
        self.shared.clock.now_ms()
    }

    /// Renews `hold` from now on, until [`Keeper::forget`]. Must be called
    /// on a tokio runtime (the task is started there if none runs).
    pub(crate) fn hold(&self, hold: NewHold) -> HoldId {
        let period = hold.lease / 3;
        let next_renewal = hold.valid_from + period;
        let held = Held {
            hold: hold.hold,
            lease: hold.lease,
            fence: hold.fence,
            next_renewal,
            deadline: hold.valid_from + hold.lease - hold.lease / MARGIN_DIVISOR,
        };
        let mut table = self.table();
        let id = table.next_id;
        table.next_id += 1;
        table.holds.insert(id, held);
        if table.task.as_ref().is_none_or(JoinHandle::is_finished) {
            table.wake_at = None;
            table.task = Some(tokio::spawn(run(self.shared.clone())));
        }
        if table.wake_at.is_none_or(|wake_at| next_renewal < wake_at) {
            // Wake the task to plan again (a permit is kept if it is busy).
            table.wake_at = Some(next_renewal);
            self.shared.wake.notify_one();
        }
        HoldId(id)
    }

    /// Stops renewing hold `id` (released, or its guard dropped). Once this
    /// returns no renewal of it is started; one already sent may still
    /// land, which a release that follows makes moot (it compares the
    /// token, and the renewal does too).
    pub(crate) fn forget(&self, id: HoldId) {
        self.table().holds.remove(&id.0);
    }

    fn table(&self) -> MutexGuard<'_, Table> {
        self.shared.table()
    }
}

impl Shared {
    fn table(&self) -> MutexGuard<'_, Table> {
        // A panic while the table is locked leaves it consistent: every
        // change to it is a single insert or remove.
        self.table
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The keeper's task: renew what is due, stop what is past its deadline,
/// sleep until the next of either (or a new hold) until cancelled.
async fn run(shared: Arc<Shared>) {
    loop {
        let now = Instant::now();
        let (due, wake_at) = {
            let mut table = shared.table();
            expire(&mut table, now);
            let due = due_renewals(&table, now);
            let wake_at = table
                .holds
                .values()
                .map(|h| h.next_renewal.min(h.deadline))
                .min();
            table.wake_at = wake_at;
            (due, wake_at)
        };
        if !due.is_empty() {
            renew(&shared, due).await;
            continue;
        }
        tokio::select! {
            () = shared.cancel.cancelled() => return,
            () = shared.wake.notified() => {}
            () = sleep_until(wake_at.unwrap_or(now)), if wake_at.is_some() => {}
        }
    }
}

/// Stops every hold whose local deadline has passed.
fn expire(table: &mut Table, now: Instant) {
    table.holds.retain(|_, h| {
        if now < h.deadline {
            return true;
        }
        let ticket = &h.hold.ticket;
        tracing::error!(
            lock = %ticket.name(), run_id = %ticket.run_id(),
            "lock lease could not be renewed before its deadline; it is lost"
        );
        metrics::counter!(telemetry::LOST_LEASES, "job" => format!("lock:{}", ticket.name()))
            .increment(1);
        h.hold.lose();
        false
    });
}

/// A hold to renew now.
struct Due {
    id: u64,
    hold: Arc<Hold>,
    lease: Duration,
    fence: u64,
}

/// The holds to renew now: none unless one is due, and then also those
/// due within a sixth of their lease (half a period early), so holds
/// taken close together share a pipeline.
fn due_renewals(table: &Table, now: Instant) -> Vec<Due> {
    if !table.holds.values().any(|h| h.next_renewal <= now) {
        return Vec::new();
    }
    table
        .holds
        .iter()
        .filter(|(_, h)| h.next_renewal <= now + h.lease / 6)
        .map(|(&id, h)| Due {
            id,
            hold: h.hold.clone(),
            lease: h.lease,
            fence: h.fence,
        })
        .collect()
}

/// Renews `due` in one pipeline and records what came back: a renewed
/// hold's next renewal and deadline move on, a hold whose lease is no
/// longer ours is stopped, and after an error each hold is retried sooner
/// than its period.
async fn renew(shared: &Shared, due: Vec<Due>) {
    let sent = Instant::now();
    let renewals: Vec<LockRenewal<'_>> = due
        .iter()
        .map(|d| LockRenewal {
            ticket: &d.hold.ticket,
            lease: d.lease,
            fence: d.fence,
        })
        .collect();
    let answer = shared.store.lock_renew(&renewals).await;
    let mut table = shared.table();
    match answer {
        Ok(ours) => {
            for (d, ours) in due.iter().zip(ours) {
                if ours {
                    note_renewed(&mut table, d.id, sent);
                } else {
                    note_lost(&mut table, d.id);
                }
            }
        }
        Err(error) => {
            metrics::counter!(telemetry::LEASE_RENEWALS, "result" => "error")
                .increment(due.len() as u64);
            metrics::counter!(telemetry::REDIS_ERRORS).increment(1);
            let now = Instant::now();
            for d in &due {
                if let Some(h) = table.holds.get_mut(&d.id) {
                    tracing::warn!(
                        lock = %h.hold.ticket.name(), run_id = %h.hold.ticket.run_id(), %error,
                        "cannot renew the lock's lease; retrying"
                    );
                    h.next_renewal = now + (h.lease / 6).min(Duration::from_secs(1));
                }
            }
        }
    }
}

/// Hold `id`'s renewal, sent at `sent`, said the lease is still ours. A
/// hold forgotten meanwhile (released, dropped) is left alone.
fn note_renewed(table: &mut Table, id: u64, sent: Instant) {
    if let Some(h) = table.holds.get_mut(&id) {
        h.next_renewal = sent + h.lease / 3;
        h.deadline = sent + h.lease - h.lease / MARGIN_DIVISOR;
        metrics::counter!(telemetry::LEASE_RENEWALS, "result" => "ok").increment(1);
    }
}

/// Hold `id`'s renewal said the lease is no longer ours: the holder is
/// told. A hold forgotten meanwhile is left alone.
fn note_lost(table: &mut Table, id: u64) {
    if let Some(h) = table.holds.remove(&id) {
        let ticket = &h.hold.ticket;
        metrics::counter!(telemetry::LEASE_RENEWALS, "result" => "lost").increment(1);
        metrics::counter!(telemetry::LOST_LEASES, "job" => format!("lock:{}", ticket.name()))
            .increment(1);
        tracing::error!(lock = %ticket.name(), run_id = %ticket.run_id(), "the lock's lease is no longer ours");
        h.hold.lose();
    }
}
