//! The lock keeper: the library's user of the [lease keeper](crate::lease).
//! One keeper task per [`Cluster`](crate::Cluster) renews the lease of
//! every lock its guards hold, instead of a watchdog task per
//! acquisition.
//!
//! An acquisition only registers its hold in the keeper's table and a
//! release or a dropped guard takes it out: no task is started and no
//! message is sent per acquisition. Each hold has its own lease, renewed
//! with `Store::lock_renew`; a hold is lost (its guard's
//! [`lost`](crate::LockGuard::lost) resolves) when a renewal says the
//! lease is no longer ours, or when its local deadline passes first.
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
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::{CancellationToken, DropGuard};

use crate::clock::{RedisClock, local_now_us};
use crate::lease::{self, Event, Leases};
use crate::store::{LockRenewal, LockTicket, Renewed, Store, StoreError};

pub(crate) use crate::lease::HoldId;

/// The renewer of a cluster's locks; cheap to clone. The task ends when
/// the last clone is dropped.
#[derive(Clone)]
pub(crate) struct Keeper {
    leases: lease::Keeper<Locks>,
    shared: Arc<Shared>,
    /// Cancels the task when the last clone goes.
    _owners: Arc<DropGuard>,
}

/// What the handles share besides the leases.
struct Shared {
    /// The Redis time as this process estimates it, for the records'
    /// `since` (see [`Keeper::sync_clock`]).
    clock: RedisClock,
    /// The keeper's task, once a hold started it. A `std` mutex, never
    /// held across an `.await`.
    task: Mutex<Option<JoinHandle<()>>>,
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

/// A lock just acquired, for [`Keeper::hold`].
pub(crate) struct NewHold {
    pub hold: Arc<Hold>,
    pub lease: Duration,
    pub fence: u64,
    /// When the acquisition was sent: the lease is valid for at least
    /// `lease` from then.
    pub valid_from: Instant,
}

impl Keeper {
    /// The keeper of `store`'s locks; its task starts with the first hold.
    pub(crate) fn new(store: Store) -> Keeper {
        let cancel = CancellationToken::new();
        Keeper {
            leases: lease::Keeper::new(Locks { store }),
            _owners: Arc::new(cancel.clone().drop_guard()),
            shared: Arc::new(Shared {
                clock: RedisClock::new(),
                task: Mutex::new(None),
                cancel,
                registered: Mutex::new(HashMap::new()),
            }),
        }
    }

    /// The store the locks are in.
    pub(crate) fn store(&self) -> &Store {
        &self.leases.user().store
    }

    /// Measures the offset between this host's clock and Redis's (one
    /// `TIME`; with `quorum`, the first master's that answers), from which
    /// [`Keeper::redis_now_ms`] estimates the Redis time. Until then the
    /// estimate is the local clock.
    pub(crate) async fn sync_clock(&self) -> Result<(), StoreError> {
        let sent_us = local_now_us();
        let server_us = self.store().server_time_us().await?;
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
        if let Err(e) = self.store().register_lock(name, self.redis_now_ms()).await {
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
        let held = Held {
            hold: hold.hold,
            fence: hold.fence,
        };
        let id = self.leases.hold(held, hold.lease, hold.valid_from);
        let mut task = self
            .shared
            .task
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if task.as_ref().is_none_or(JoinHandle::is_finished) {
            let run = self.leases.clone().run(self.shared.cancel.clone());
            *task = Some(tokio::spawn(run));
        }
        id
    }

    /// Stops renewing hold `id` (released, or its guard dropped). Once this
    /// returns no renewal of it is started; one already sent may still
    /// land, which a release that follows makes moot (it compares the
    /// token, and the renewal does too).
    pub(crate) fn forget(&self, id: HoldId) {
        self.leases.release(id);
    }
}

/// The locks' side of the lease keeper: a lease per hold, renewed with
/// the lock renew script.
struct Locks {
    store: Store,
}

/// One acquisition the keeper renews.
struct Held {
    hold: Arc<Hold>,
    /// The holder's fence, for a lock state that expired all the same.
    fence: u64,
}

/// One hold's renewal, owned while the round is on its way.
struct Renewing {
    hold: Arc<Hold>,
    lease: Duration,
    fence: u64,
}

impl Leases for Locks {
    type Hold = Held;
    type Renewal = Renewing;

    fn renewal(&self, held: &Held, lease: Duration) -> Renewing {
        Renewing {
            hold: held.hold.clone(),
            lease,
            fence: held.fence,
        }
    }

    async fn renew(&self, renewals: &[Renewing]) -> Result<Vec<Renewed>, StoreError> {
        let renewals: Vec<LockRenewal<'_>> = renewals
            .iter()
            .map(|r| LockRenewal {
                ticket: &r.hold.ticket,
                lease: r.lease,
                fence: r.fence,
            })
            .collect();
        let held = self.store.lock_renew(&renewals).await?;
        Ok(held
            .into_iter()
            .map(|held| if held { Renewed::Held } else { Renewed::Lost })
            .collect())
    }

    fn lose(held: &Held) {
        held.hold.lose();
    }

    fn label(held: &Held) -> String {
        format!("lock:{}", held.hold.ticket.name())
    }

    fn log(held: &Held, event: Event<'_>) {
        let ticket = &held.hold.ticket;
        match event {
            Event::Renewed => {}
            Event::Lost => tracing::error!(
                lock = %ticket.name(), run_id = %ticket.run_id(),
                "the lock's lease is no longer ours"
            ),
            Event::Expired => tracing::error!(
                lock = %ticket.name(), run_id = %ticket.run_id(),
                "lock lease could not be renewed before its deadline; it is lost"
            ),
            Event::Retrying(error) => tracing::warn!(
                lock = %ticket.name(), run_id = %ticket.run_id(), %error,
                "cannot renew the lock's lease; retrying"
            ),
        }
    }
}
