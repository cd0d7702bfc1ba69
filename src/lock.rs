//! Cluster-wide locks: the library's [`LockBuilder`] / [`LockGuard`], and
//! `cronlease lock NAME -- CMD` (the `flock(1)` of a cluster) built on them.
//!
//! A lock is the keys of the pseudo-job `lock:NAME`, with a fence like any
//! claim. Its holder's lease is renewed by a watchdog every lease/3 while
//! the guard lives; [`LockGuard::lost`] resolves when the lease can no
//! longer be proven (a renewal says it is gone, or none got through before
//! the local deadline). Release compares the holder's token, so only the
//! holder can release, and wakes the waiters through pub/sub. A waiter
//! sleeps until a release is published or the holder's lease would lapse
//! (a holder that died publishes nothing), never polling.

use std::time::Duration;

use futures_util::StreamExt;
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep, sleep_until};
use tokio_util::sync::CancellationToken;

use crate::exit::Exit;
use crate::outcome::Status;
use crate::runner::{Process, StdioMode};
use crate::store::{Keys, LockReply, Store, StoreError};
use crate::task::{self, Attempts, RunContext, RunResult, Stop};
use crate::watchdog::{self, LeaseHold};

/// Why a lock could not be used.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("cannot read the current directory: {0}")]
    Workdir(std::io::Error),
}

/// A lock to take: its name, lease and holder. From
/// [`crate::embed::Cluster::lock`].
///
/// ```no_run
/// # async fn f(cluster: cronlease::embed::Cluster) -> Result<(), cronlease::lock::LockError> {
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
    store: Store,
    name: String,
    /// Who re-enters; None: every acquisition is a new holder.
    owner: Option<String>,
    lease: Duration,
    holder: String,
    host: String,
}

impl LockBuilder {
    /// The lock `name` in `store`, with a 30 s lease, held by `holder` on
    /// `host` until [`LockBuilder::holder`] says otherwise.
    pub(crate) fn new(store: Store, name: &str, holder: &str, host: &str) -> LockBuilder {
        LockBuilder {
            store,
            name: name.to_string(),
            owner: None,
            lease: Duration::from_secs(30),
            holder: holder.to_string(),
            host: host.to_string(),
        }
    }

    /// How long the lock holds without a renewal (renewed every third).
    pub fn lease(mut self, lease: Duration) -> LockBuilder {
        self.lease = lease;
        self
    }

    /// Who holds it, as waiters and `status` see it.
    pub fn holder(mut self, holder: &str) -> LockBuilder {
        self.holder = holder.to_string();
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
    /// # async fn f(cluster: cronlease::embed::Cluster) -> Result<(), cronlease::lock::LockError> {
    /// let outer = cluster.lock("ledger").owner("settlement-2026-11-24").acquire().await?;
    /// let inner = cluster.lock("ledger").owner("settlement-2026-11-24").acquire().await?;
    /// assert_eq!(outer.fence(), inner.fence());
    /// inner.release().await?;   // still held
    /// outer.release().await?;   // free
    /// # Ok(()) }
    /// ```
    pub fn owner(mut self, owner: &str) -> LockBuilder {
        self.owner = Some(owner.to_string());
        self
    }

    /// Who holds the lock now (holder, host, fence, since, time left,
    /// holds); None when it is free.
    pub async fn info(&self) -> Result<Option<crate::store::LockHolder>, LockError> {
        Ok(self.store.lock_holder(&self.name).await?)
    }

    /// Takes the lock if it is free; `None` if someone holds it.
    pub async fn try_acquire(&self) -> Result<Option<LockGuard>, LockError> {
        Ok(self.acquire_until(Wait::No).await?.guard())
    }

    /// Takes the lock, waiting as long as it takes.
    pub async fn acquire(&self) -> Result<LockGuard, LockError> {
        match self.acquire_until(Wait::Forever).await? {
            Acquisition::Acquired(guard) => Ok(guard),
            Acquisition::HeldBy(_) => unreachable!("waiting forever ends only with the lock"),
        }
    }

    /// Takes the lock, waiting at most `wait`; `None` if it stayed held.
    pub async fn acquire_within(&self, wait: Duration) -> Result<Option<LockGuard>, LockError> {
        Ok(self
            .acquire_until(Wait::Until(Instant::now() + wait))
            .await?
            .guard())
    }

    async fn acquire_until(&self, wait: Wait) -> Result<Acquisition, LockError> {
        let run_id = match &self.owner {
            Some(owner) => format!("owner:{owner}"),
            None => uuid::Uuid::new_v4().to_string(),
        };
        let mut waiter = None;
        loop {
            let sent = Instant::now();
            let reply = self
                .store
                .lock_acquire(&self.name, &run_id, self.lease, &self.holder, &self.host)
                .await?;
            let (holder, ttl_ms) = match reply {
                LockReply::Acquired { fence, lease_key }
                | LockReply::Reentered {
                    fence, lease_key, ..
                } => {
                    return Ok(Acquisition::Acquired(
                        self.hold(run_id, fence, lease_key, sent),
                    ));
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
                waiter = Some(self.store.lock_waiter(&self.name).await?);
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

    /// The guard of a lock just acquired, its lease under a watchdog.
    fn hold(&self, run_id: String, fence: u64, lease_key: String, sent: Instant) -> LockGuard {
        let service = CancellationToken::new();
        let (watchdog, watchdog_task) =
            watchdog::new(self.store.clone(), self.lease, service.clone());
        let (stop_tx, stop_rx) = watch::channel(None);
        watchdog.send(watchdog::Command::Hold(LeaseHold {
            job: Keys::lock_job(&self.name),
            run_id: run_id.clone(),
            tick_ms: 0,
            fence,
            lease_key,
            replica: self.holder.clone(),
            valid_from: sent,
            stop: stop_tx,
        }));
        tracing::info!(lock = %self.name, fence, %run_id, "lock acquired");
        LockGuard {
            store: self.store.clone(),
            name: self.name.clone(),
            holder: self.holder.clone(),
            run_id,
            fence,
            watchdog,
            service,
            watchdog_task: Some(tokio::spawn(watchdog_task)),
            stop: stop_rx,
        }
    }
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

/// A held lock. Its lease is renewed until [`LockGuard::release`]; dropping
/// the guard stops the renewals, and the lock lapses with its lease.
pub struct LockGuard {
    store: Store,
    name: String,
    holder: String,
    run_id: String,
    fence: u64,
    watchdog: watchdog::Handle,
    service: CancellationToken,
    watchdog_task: Option<JoinHandle<()>>,
    stop: watch::Receiver<Option<Stop>>,
}

impl LockGuard {
    /// The fencing token of this acquisition: higher than every earlier
    /// one of the lock. Writes made under the lock should carry it, and
    /// their store refuse a lower one than it has seen.
    pub fn fence(&self) -> u64 {
        self.fence
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Resolves when the lease can no longer be proven: someone else may
    /// hold the lock now. Pending while it is held.
    pub async fn lost(&self) {
        let mut stop = self.stop.clone();
        loop {
            if *stop.borrow_and_update() == Some(Stop::LostLease) {
                return;
            }
            if stop.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    }

    /// Releases this hold if the lock is still ours (`true`): the last
    /// hold of a reentrant lock, or the only one, frees it and wakes the
    /// waiters; `false` if its lease had already been lost.
    pub async fn release(mut self) -> Result<bool, LockError> {
        self.stop_renewing().await;
        let released = self.store.lock_release(&self.name, &self.run_id).await?;
        if released {
            tracing::info!(lock = %self.name, "lock released");
        } else {
            tracing::warn!(lock = %self.name, "the lock was no longer ours to release");
        }
        Ok(released)
    }

    /// Ends the renewals and waits until the watchdog has let go.
    async fn stop_renewing(&mut self) {
        let (done_tx, done_rx) = oneshot::channel();
        self.watchdog.send(watchdog::Command::Release {
            run_id: self.run_id.clone(),
            done: done_tx,
        });
        let _ = done_rx.await;
        self.service.cancel();
        if let Some(task) = self.watchdog_task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        self.service.cancel();
    }
}

/// What `cronlease lock` runs under which lock.
#[derive(Debug, Clone)]
pub struct LockOptions {
    pub name: String,
    pub lease: Duration,
    /// How long to wait for the lock; `None`: give up at once.
    pub wait: Option<Duration>,
    pub kill_grace: Duration,
    /// The command and its arguments (non-empty).
    pub command: Vec<String>,
    /// Who holds the lock, as shown to other waiters.
    pub holder: String,
    pub host: String,
}

/// `cronlease lock`: takes the lock, runs the command, releases the lock;
/// returns the exit status for the process. `shutdown` (SIGTERM/SIGINT)
/// stops a waiter, or interrupts the command (SIGTERM, `kill_grace`,
/// SIGKILL).
pub async fn run(
    store: Store,
    options: LockOptions,
    shutdown: CancellationToken,
) -> Result<Exit, LockError> {
    // Read before the lock is taken: an error then leaves nothing held.
    let workdir = std::env::current_dir().map_err(LockError::Workdir)?;
    let builder =
        LockBuilder::new(store, &options.name, &options.holder, &options.host).lease(options.lease);
    let wait = match options.wait {
        None => Wait::No,
        Some(wait) => Wait::Until(Instant::now() + wait),
    };
    let acquired = tokio::select! {
        acquired = builder.acquire_until(wait) => acquired?,
        () = shutdown.cancelled() => return Ok(Exit::TempFail),
    };
    let guard = match acquired {
        Acquisition::Acquired(guard) => guard,
        Acquisition::HeldBy(holder) => {
            eprintln!(
                "cronlease lock: lock {:?} is held by {holder}",
                options.name
            );
            return Ok(Exit::TempFail);
        }
    };
    let process = Process {
        argv: options.command.clone(),
        workdir,
        env: vec![
            ("CRONLEASE_LOCK".to_string(), options.name.clone()),
            ("CRONLEASE_FENCE".to_string(), guard.fence.to_string()),
            ("CRONLEASE_RUN_ID".to_string(), guard.run_id.clone()),
        ],
        stdio: StdioMode::Inherit,
    };
    let result = run_held(&guard, &options, &process, &shutdown).await;
    if let Err(e) = guard.release().await {
        tracing::warn!(lock = %options.name, error = %e, "cannot release the lock; it lapses with its lease");
    }
    Ok(match result.status {
        Status::Ok => Exit::Success,
        Status::LostLease => {
            eprintln!(
                "cronlease lock: the lease of lock {:?} was lost; the command was killed",
                options.name
            );
            Exit::TempFail
        }
        _ => match (result.exit_code, result.signal) {
            (Some(code), _) => Exit::Command(u8::try_from(code).unwrap_or(1)),
            (None, Some(signal)) => Exit::Command(u8::try_from(128 + signal).unwrap_or(1)),
            (None, None) => Exit::Failure,
        },
    })
}

/// Runs `process` under the guard's lease: killed at once if it is lost,
/// interrupted on `shutdown`.
async fn run_held(
    guard: &LockGuard,
    options: &LockOptions,
    process: &Process,
    shutdown: &CancellationToken,
) -> RunResult {
    let context = RunContext {
        job: Keys::lock_job(&options.name),
        tick_ms: 0,
        fence: guard.fence,
        run_id: guard.run_id.clone(),
        replica: guard.holder.clone(),
        attempt: 0,
        grace: options.kill_grace,
    };
    let once = Attempts {
        timeout: None,
        retries: 0,
        retry_backoff: Duration::ZERO,
        output_tail_bytes: 0,
    };
    let run = task::execute(process, context, once, guard.stop.clone());
    tokio::pin!(run);
    tokio::select! {
        result = &mut run => result,
        () = shutdown.cancelled() => {
            guard.watchdog.send(watchdog::Command::StopAll(Stop::Shutdown));
            run.await
        }
    }
}
