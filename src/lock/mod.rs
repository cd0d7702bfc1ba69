//! Cluster-wide locks: the library's [`LockBuilder`] / [`LockGuard`];
//! `cronlease lock NAME -- CMD` (the `flock(1)` of a cluster) is built on
//! them in [`command`].
//!
//! A lock is the keys of the pseudo-job `lock:NAME`, with a fence like any
//! claim. Its holder's lease is renewed every lease/3 while the guard
//! lives, by the cluster's one [`keeper`] task; [`LockGuard::lost`]
//! resolves when the lease can no longer be proven (a renewal says it is
//! gone, or none got through before the local deadline). Release compares
//! the holder's token, so only the holder can release, and wakes the
//! waiters through pub/sub. A waiter sleeps until a release is published
//! or the holder's lease would lapse (a holder that died publishes
//! nothing), never polling. A refused acquisition marks the holder's
//! record, and a release publishes only a marked record's, so a lock
//! nobody asked for meanwhile costs no `PUBLISH`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use futures_util::StreamExt;
use tokio::time::{Instant, sleep, sleep_until};

use crate::config::{self, MAX_LEASE, MIN_LEASE};
use crate::embed::ConnectionError;
use crate::store::{LockHolderTag, LockReply, LockRequest, Reentry, StoreError};

#[cfg(feature = "cli")]
pub mod command;
pub(crate) mod keeper;

use keeper::{Hold, HoldId, Keeper, NewHold};

/// Why a lock could not be acquired, released or read.
///
/// Being held by someone else is not an error:
/// [`LockBuilder::try_acquire`] and [`LockBuilder::acquire_within`] return
/// `None` for it.
///
/// ```no_run
/// # async fn f(cluster: cronlease::Cluster) {
/// match cluster.lock("report").try_acquire().await {
///     Ok(Some(guard)) => { /* … */ let _ = guard.release().await; }
///     Ok(None) => eprintln!("someone else is on it"),
///     Err(cronlease::LockError::Redis(error)) => eprintln!("cannot tell: {error}"),
///     Err(other) => eprintln!("{other}"),
/// }
/// # }
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LockError {
    /// Redis could not be reached (with `quorum`: no majority answered
    /// either way), or did not do what was asked. This caller does not
    /// hold the lock; a grant made in Redis whose answer was lost lapses
    /// with its lease.
    #[error(transparent)]
    Redis(#[from] ConnectionError),
    /// The lock's name is not 1 to 128 characters from `A-Z a-z 0-9 _ .
    /// -` (it is part of Redis keys). Nothing was sent to Redis.
    #[error("invalid lock name {0:?}: expected 1 to 128 characters from A-Z a-z 0-9 _ . -")]
    Name(String),
    /// The lease ([`LockBuilder::lease`]) cannot be kept: below `minimum`
    /// its renewals (every third of it) would not outlast one Redis
    /// command timeout, above `maximum` a holder that died blocks the lock
    /// too long. Nothing was sent to Redis.
    #[error(
        "lock lease {} cannot be kept: expected {} to {} (it is renewed every third of it, which must outlast the Redis command timeout)",
        humantime::format_duration(*.lease),
        humantime::format_duration(*.minimum),
        humantime::format_duration(*.maximum)
    )]
    Lease {
        /// The lease asked for.
        lease: Duration,
        /// The shortest usable lease: 1 s, or more with a command timeout
        /// above 333 ms.
        minimum: Duration,
        /// The longest: 1 h.
        maximum: Duration,
    },
}

impl From<StoreError> for LockError {
    fn from(error: StoreError) -> LockError {
        LockError::Redis(error.into())
    }
}

/// A lock to take: its name, lease, holder and owner.
///
/// From [`Cluster::lock`](crate::Cluster::lock). Cheap to clone; nothing
/// is sent to Redis until an acquisition (or [`LockBuilder::info`]).
///
/// Every acquisition gets a fencing token ([`LockGuard::fence`]), and the
/// lease is renewed while the [`LockGuard`] lives. With
/// [`RedisSettings::quorum`](crate::RedisSettings::quorum) the lock holds
/// only with a majority of the masters, as RedLock does.
///
/// ```no_run
/// # async fn f(cluster: cronlease::Cluster) -> Result<(), cronlease::LockError> {
/// use std::time::Duration;
/// let guard = cluster.lock("nightly-migration").lease(Duration::from_secs(30)).acquire().await?;
/// tokio::select! {
///     () = migrate(guard.fence()) => {}
///     () = guard.lost() => eprintln!("lock lost: stop writing"),
/// }
/// guard.release().await?;
/// # Ok(()) }
/// # async fn migrate(_fence: u64) {}
/// ```
#[derive(Clone)]
pub struct LockBuilder {
    /// Renews the leases of the guards (the cluster's one task), and holds
    /// the store.
    keeper: Keeper,
    name: String,
    /// The run id of the owner who re-enters (`owner:<owner>`); None:
    /// every acquisition is a new holder.
    owner: Option<String>,
    lease: Duration,
    /// Holder and host, shared with the `Cluster` until
    /// [`LockBuilder::holder`] sets another.
    holder: Arc<LockHolderTag>,
}

impl LockBuilder {
    /// The lock `name` in the keeper's store, with a 30 s lease, held by
    /// `holder` until [`LockBuilder::holder`] says otherwise; `keeper`
    /// renews its guards' leases.
    pub(crate) fn new(keeper: Keeper, name: &str, holder: Arc<LockHolderTag>) -> LockBuilder {
        LockBuilder {
            keeper,
            name: name.to_string(),
            owner: None,
            lease: Duration::from_secs(30),
            holder,
        }
    }

    /// How long the lock holds without a renewal (default 30 s, whole
    /// milliseconds); the guard renews it every third of it. From 1 s to
    /// 1 h, and more than three times the Redis command timeout (default
    /// 2 s, so above 6 s), or renewals could not get through in time:
    /// acquiring with another is [`LockError::Lease`]. Longer: a holder
    /// that died blocks the lock longer.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// # async fn f(cluster: cronlease::Cluster) -> Result<(), cronlease::LockError> {
    /// let guard = cluster.lock("nightly-migration").lease(Duration::from_secs(60)).acquire().await?;
    /// # Ok(()) }
    /// ```
    pub fn lease(mut self, lease: Duration) -> LockBuilder {
        self.lease = lease;
        self
    }

    /// Who holds it, as [`LockBuilder::info`] and `cronlease status --lock`
    /// show it (default `<host>-<pid>` of this process). A label only:
    /// who may release is decided by the guard, and who re-enters by
    /// [`LockBuilder::owner`].
    ///
    /// ```no_run
    /// # async fn f(cluster: cronlease::Cluster) -> Result<(), cronlease::LockError> {
    /// let guard = cluster.lock("report").holder("report-worker-3").acquire().await?;
    /// # Ok(()) }
    /// ```
    pub fn holder(mut self, holder: &str) -> LockBuilder {
        self.holder = Arc::new(LockHolderTag::new(holder, self.holder.host()));
        self
    }

    /// Makes the lock reentrant for `owner`: while it is held under this
    /// owner, acquiring it again under the same owner succeeds at once
    /// (the same fence), and the lock is free only after as many releases
    /// as acquisitions — Redisson's `RLock`, with the owner named instead
    /// of being the thread. The use case: code that holds the lock calls
    /// code that takes it too (a nightly job calling a helper that also
    /// guards itself). Name the owner after the unit of work that may
    /// re-enter (a request id, a job run id): everything with the same
    /// owner is one holder, on any instance.
    ///
    /// ```no_run
    /// # async fn f(cluster: cronlease::Cluster) -> Result<(), cronlease::LockError> {
    /// let outer = cluster.lock("ledger").owner("settlement-2026-11-24").acquire().await?;
    /// let inner = cluster.lock("ledger").owner("settlement-2026-11-24").acquire().await?;
    /// assert_eq!(outer.fence(), inner.fence());
    /// inner.release().await?;   // still held
    /// outer.release().await?;   // free
    /// # Ok(()) }
    /// ```
    pub fn owner(mut self, owner: &str) -> LockBuilder {
        self.owner = Some(format!("owner:{owner}"));
        self
    }

    /// Who holds the lock now; `None` when it is free. One read (with
    /// `quorum`: of the first master that answers), so only a snapshot.
    /// [`LockError::Redis`] if Redis cannot say.
    ///
    /// ```no_run
    /// # async fn f(cluster: cronlease::Cluster) -> Result<(), cronlease::LockError> {
    /// match cluster.lock("report").info().await? {
    ///     Some(holder) => println!("held by {} on {} for {:?} more", holder.holder, holder.host, holder.time_left),
    ///     None => println!("free"),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn info(&self) -> Result<Option<crate::LockHolder>, LockError> {
        self.check()?;
        Ok(self.keeper.store().lock_holder(&self.name).await?)
    }

    /// The name and lease are usable (see [`LockError::Name`] and
    /// [`LockError::Lease`]).
    fn check(&self) -> Result<(), LockError> {
        if !config::is_name(&self.name, 128) {
            return Err(LockError::Name(self.name.clone()));
        }
        let command_timeout = self.keeper.store().command_timeout();
        if self.lease < MIN_LEASE
            || self.lease > MAX_LEASE
            || !config::renewable(self.lease, command_timeout)
        {
            // The shortest whole-ms lease whose third outlasts the timeout.
            let minimum = MIN_LEASE.max(command_timeout * 3 + Duration::from_millis(1));
            return Err(LockError::Lease {
                lease: self.lease,
                minimum,
                maximum: MAX_LEASE,
            });
        }
        Ok(())
    }

    /// Takes the lock if it is free (or re-enters it, see
    /// [`LockBuilder::owner`]); `None` if someone else holds it. One
    /// attempt, no waiting.
    ///
    /// ```no_run
    /// # async fn f(cluster: cronlease::Cluster) -> Result<(), cronlease::LockError> {
    /// match cluster.lock("report").try_acquire().await? {
    ///     Some(guard) => {
    ///         // … only one instance is here …
    ///         guard.release().await?;
    ///     }
    ///     None => println!("another instance is on it"),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn try_acquire(&self) -> Result<Option<LockGuard>, LockError> {
        Ok(self.acquire_until(Wait::No).await?.guard())
    }

    /// Takes the lock, waiting as long as it takes. A waiter sends nothing
    /// meanwhile: it sleeps until the holder's release is published, or
    /// until the holder's lease would lapse (a holder that died publishes
    /// nothing), then tries again. A Redis error ends the wait with
    /// [`LockError::Redis`]. Dropping the future gives up.
    ///
    /// ```no_run
    /// # async fn f(cluster: cronlease::Cluster) -> Result<(), cronlease::LockError> {
    /// let guard = cluster.lock("ledger").acquire().await?;
    /// # Ok(()) }
    /// ```
    pub async fn acquire(&self) -> Result<LockGuard, LockError> {
        match self.acquire_until(Wait::Forever).await? {
            Acquisition::Acquired(guard) => Ok(guard),
            Acquisition::HeldBy(_) => unreachable!("waiting forever ends only with the lock"),
        }
    }

    /// Takes the lock, waiting at most `wait` as [`LockBuilder::acquire`]
    /// waits; `None` if it is still held then. A zero `wait` is
    /// [`LockBuilder::try_acquire`].
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// # async fn f(cluster: cronlease::Cluster) -> Result<(), cronlease::LockError> {
    /// let Some(guard) = cluster.lock("ledger").acquire_within(Duration::from_secs(5)).await? else {
    ///     println!("the ledger is busy: try the next tick");
    ///     return Ok(());
    /// };
    /// # Ok(()) }
    /// ```
    pub async fn acquire_within(&self, wait: Duration) -> Result<Option<LockGuard>, LockError> {
        Ok(self
            .acquire_until(Wait::Until(Instant::now() + wait))
            .await?
            .guard())
    }

    async fn acquire_until(&self, wait: Wait) -> Result<Acquisition, LockError> {
        self.check()?;
        let mut run_id_buffer = [0; uuid::fmt::Hyphenated::LENGTH];
        let (run_id, reentry) = match &self.owner {
            Some(run_id) => (run_id.as_str(), Reentry::Owner),
            None => (fresh_run_id(&mut run_id_buffer), Reentry::Once),
        };
        let store = self.keeper.store();
        let hold = Arc::new(Hold::new(store.lock_ticket(&self.name, run_id)));
        let mut waiter = None;
        loop {
            let sent = Instant::now();
            let request = LockRequest {
                reentry,
                lease: self.lease,
                holder: &self.holder,
                since_ms: self.keeper.redis_now_ms(),
            };
            let reply = store.lock_acquire(&hold.ticket, request).await?;
            let (holder, ttl_ms) = match reply {
                LockReply::Acquired { fence } => {
                    // Registered once the hold is renewed: the registry
                    // waits for Redis, the lease must not.
                    let guard = self.hold(hold, reentry, fence, sent);
                    self.keeper.register(&self.name).await;
                    return Ok(Acquisition::Acquired(guard));
                }
                LockReply::Reentered { fence, .. } => {
                    return Ok(Acquisition::Acquired(self.hold(hold, reentry, fence, sent)));
                }
                LockReply::Held { holder, ttl_ms } => (holder, ttl_ms),
            };
            let deadline = match wait {
                Wait::No => return Ok(Acquisition::HeldBy(holder)),
                Wait::Until(deadline) if Instant::now() >= deadline => {
                    return Ok(Acquisition::HeldBy(holder));
                }
                Wait::Until(deadline) => Some(deadline),
                Wait::Forever => None,
            };
            if waiter.is_none() {
                // Subscribe, then ask again: a release between the two is
                // not missed.
                waiter = Some(store.lock_waiter(&self.name).await?);
                continue;
            }
            let pubsub = waiter
                .as_mut()
                .expect("the waiter was subscribed just above");
            let lapse =
                Instant::now() + Duration::from_millis(u64::try_from(ttl_ms).unwrap_or(0).max(1));
            tracing::debug!(lock = %self.name, %holder, ttl_ms, "waiting for the lock");
            let mut messages = pubsub.on_message();
            tokio::select! {
                _ = messages.next() => {}
                () = sleep_until(lapse) => {}
                () = sleep_until(deadline.unwrap_or(lapse)) => {}
            }
            // A message may arrive just before the lock is free to take; a
            // breath avoids a busy loop on a flood of releases.
            sleep(Duration::from_millis(1)).await;
        }
    }

    /// The guard of a lock just acquired, its lease under the keeper.
    fn hold(&self, hold: Arc<Hold>, reentry: Reentry, fence: u64, sent: Instant) -> LockGuard {
        let id = self.keeper.hold(NewHold {
            hold: hold.clone(),
            lease: self.lease,
            fence,
            valid_from: sent,
        });
        tracing::info!(lock = %self.name, fence, run_id = %hold.ticket.run_id(), "lock acquired");
        LockGuard {
            keeper: self.keeper.clone(),
            id: Some(id),
            hold,
            holder: self.holder.clone(),
            reentry,
            fence,
        }
    }
}

/// A fresh run id for an acquisition without an owner, written into
/// `buffer`, without a system call or an allocation: a UUID v4 whose
/// random bits are drawn once per process, with a counter of acquisitions
/// XORed into its low 56 bits. Two acquisitions of one process never
/// share it, and two processes only if their random bits happened to
/// match (a 1 in 2^66 chance for any two).
fn fresh_run_id(buffer: &mut [u8; uuid::fmt::Hyphenated::LENGTH]) -> &str {
    static BASE: OnceLock<u128> = OnceLock::new();
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let base = *BASE.get_or_init(|| uuid::Uuid::new_v4().as_u128());
    let count = COUNTER.fetch_add(1, Ordering::Relaxed) & ((1 << 56) - 1);
    // The version and variant bits lie above bit 56, untouched.
    uuid::Uuid::from_u128(base ^ u128::from(count))
        .hyphenated()
        .encode_lower(buffer)
}

/// How an acquisition ended.
enum Acquisition {
    Acquired(LockGuard),
    /// Not acquired: held by this holder.
    HeldBy(String),
}

impl Acquisition {
    fn guard(self) -> Option<LockGuard> {
        match self {
            Acquisition::Acquired(guard) => Some(guard),
            Acquisition::HeldBy(_) => None,
        }
    }
}

/// How long an acquisition waits.
#[derive(Debug, Clone, Copy)]
enum Wait {
    No,
    Until(Instant),
    Forever,
}

/// A held lock, until [`LockGuard::release`].
///
/// The cluster's lock keeper (one task on the tokio runtime for all its
/// locks) renews its lease every third of it. Dropping the guard stops the
/// renewals
/// without releasing: the lock stays taken until its lease lapses. Work
/// done under the lock should carry [`LockGuard::fence`] and stop when
/// [`LockGuard::lost`] resolves.
///
/// ```no_run
/// # async fn f(cluster: cronlease::Cluster) -> Result<(), Box<dyn std::error::Error>> {
/// # async fn migrate(fence: u64) -> Result<(), std::io::Error> { Ok(()) }
/// let guard = cluster.lock("nightly-migration").acquire().await?;
/// tokio::select! {
///     result = migrate(guard.fence()) => result?,
///     () = guard.lost() => return Err("lock lost: stopped writing".into()),
/// }
/// guard.release().await?;
/// # Ok(()) }
/// ```
pub struct LockGuard {
    /// Renews the lease, and holds the store.
    keeper: Keeper,
    /// This acquisition in the keeper's table, until it is taken out
    /// (release or drop).
    id: Option<HoldId>,
    /// The lock's names in Redis and the holder's token, and whether the
    /// keeper found the lease lost.
    hold: Arc<Hold>,
    holder: Arc<LockHolderTag>,
    reentry: Reentry,
    fence: u64,
}

impl LockGuard {
    /// The fencing token of this acquisition: higher than every earlier
    /// acquisition's of the lock (a re-entered hold has its first hold's).
    /// Writes made under the lock should carry it, and their store refuse
    /// a lower one than it has seen: a holder that lost the lock without
    /// knowing it then cannot overwrite the next holder's work.
    ///
    /// ```no_run
    /// # async fn write_balance(account: &str, fence: u64) {}
    /// # async fn f(cluster: cronlease::Cluster) -> Result<(), cronlease::LockError> {
    /// let guard = cluster.lock("account-42").acquire().await?;
    /// write_balance("42", guard.fence()).await;
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn fence(&self) -> u64 {
        self.fence
    }

    /// The lock's name, as given to [`Cluster::lock`](crate::Cluster::lock).
    ///
    /// ```no_run
    /// # async fn f(cluster: cronlease::Cluster) -> Result<(), cronlease::LockError> {
    /// let guard = cluster.lock("report").acquire().await?;
    /// assert_eq!(guard.name(), "report");
    /// # Ok(()) }
    /// ```
    pub fn name(&self) -> &str {
        self.hold.ticket.name()
    }

    /// Resolves when the lease can no longer be proven: a renewal found it
    /// gone, or no renewal got through before a local deadline (the send
    /// time of the last good renewal plus the lease, less a fifth of it),
    /// so before the lease can lapse in Redis. Someone else may hold the
    /// lock from then on: stop writing. Pending while the lock is held;
    /// once resolved, it resolves at once. Cancel-safe.
    ///
    /// ```no_run
    /// # async fn migrate(fence: u64) {}
    /// # async fn f(cluster: cronlease::Cluster) -> Result<(), cronlease::LockError> {
    /// let guard = cluster.lock("nightly-migration").acquire().await?;
    /// tokio::select! {
    ///     () = migrate(guard.fence()) => { guard.release().await?; }
    ///     () = guard.lost() => eprintln!("lock lost: migration stopped"),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn lost(&self) {
        self.hold.lost().await;
    }

    /// Stops the renewals and releases this hold: `Ok(true)` if the lock
    /// was still ours (the last hold of a re-entered lock, or the only one,
    /// frees it and wakes the waiters), `Ok(false)` if its lease had
    /// already been lost. With `quorum`, `true` when a majority released
    /// it. On [`LockError::Redis`] the renewals have stopped all the same:
    /// the lock lapses with its lease.
    ///
    /// ```no_run
    /// # async fn f(cluster: cronlease::Cluster) -> Result<(), cronlease::LockError> {
    /// let guard = cluster.lock("report").acquire().await?;
    /// // … the work …
    /// if !guard.release().await? {
    ///     eprintln!("the lock had been lost before the work ended");
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn release(mut self) -> Result<bool, LockError> {
        if let Some(id) = self.id.take() {
            self.keeper.forget(id);
        }
        let released = self
            .keeper
            .store()
            .lock_release(&self.hold.ticket, self.reentry)
            .await?;
        if released {
            tracing::info!(lock = %self.name(), "lock released");
        } else {
            tracing::warn!(lock = %self.name(), "the lock was no longer ours to release");
        }
        Ok(released)
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if let Some(id) = self.id.take() {
            self.keeper.forget(id);
        }
    }
}

impl std::fmt::Debug for LockBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockBuilder")
            .field("name", &self.name)
            .field("owner", &self.owner)
            .field("lease", &self.lease)
            .field("holder", &self.holder.holder())
            .field("host", &self.holder.host())
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockGuard")
            .field("name", &self.name())
            .field("holder", &self.holder.holder())
            .field("fence", &self.fence)
            .field("run_id", &self.hold.ticket.run_id())
            .finish_non_exhaustive()
    }
}
