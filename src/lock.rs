//! `cronlease lock NAME -- CMD`: the `flock(1)` of a cluster.
//!
//! Takes a cluster-wide lock in Redis (the keys of the pseudo-job
//! `lock:NAME`, with a fence like any claim), runs the command under the
//! same watchdog as a job (the lease renewed every lease/3, the command
//! killed at once if the lease is lost), and releases the lock, waking the
//! waiters through pub/sub. A waiter sleeps until a release is published or
//! the holder's lease would lapse (a holder that died publishes nothing),
//! never polling.

use std::time::Duration;

use futures_util::StreamExt;
use tokio::sync::{oneshot, watch};
use tokio::time::{Instant, sleep, sleep_until};
use tokio_util::sync::CancellationToken;

use crate::exit::Exit;
use crate::outcome::Status;
use crate::runner::{Process, StdioMode};
use crate::store::{Keys, LockReply, Store, StoreError};
use crate::task::{self, Attempts, RunContext, RunResult, Stop};
use crate::watchdog::{self, LeaseHold};

/// What to run under which lock.
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

#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("cannot read the current directory: {0}")]
    Workdir(std::io::Error),
}

/// Takes the lock, runs the command, releases the lock; returns the exit
/// status for the process. `shutdown` (SIGTERM/SIGINT) stops a waiter, or
/// interrupts the command (SIGTERM, `kill_grace`, SIGKILL).
pub async fn run(
    store: Store,
    options: LockOptions,
    shutdown: CancellationToken,
) -> Result<Exit, LockError> {
    let run_id = uuid::Uuid::new_v4().to_string();
    // Read before the lock is taken: an error then leaves nothing held.
    let workdir = std::env::current_dir().map_err(LockError::Workdir)?;
    let Some(held) = acquire(&store, &options, &run_id, &shutdown).await? else {
        return Ok(Exit::TempFail);
    };
    tracing::info!(lock = %options.name, fence = held.fence, %run_id, "lock acquired");
    let process = Process {
        argv: options.command.clone(),
        workdir,
        env: vec![
            ("CRONLEASE_LOCK".to_string(), options.name.clone()),
            ("CRONLEASE_FENCE".to_string(), held.fence.to_string()),
            ("CRONLEASE_RUN_ID".to_string(), run_id.clone()),
        ],
        stdio: StdioMode::Inherit,
    };
    let result = run_held(&store, &options, &run_id, held, &process, &shutdown).await;
    match store.lock_release(&options.name, &run_id).await {
        Ok(true) => tracing::info!(lock = %options.name, "lock released"),
        Ok(false) => tracing::warn!(lock = %options.name, "the lock was no longer ours to release"),
        Err(e) => {
            tracing::warn!(lock = %options.name, error = %e, "cannot release the lock; it lapses with its lease")
        }
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

/// A lock this command acquired.
struct Held {
    fence: u64,
    lease_key: String,
    /// When the acquiring request was sent: the lease holds from then.
    valid_from: Instant,
}

/// Runs `process` under the lock's lease, renewed by a watchdog of its own
/// until the command ends; the lease is no longer renewed when this returns.
async fn run_held(
    store: &Store,
    options: &LockOptions,
    run_id: &str,
    held: Held,
    process: &Process,
    shutdown: &CancellationToken,
) -> RunResult {
    let service = CancellationToken::new();
    let (watchdog, watchdog_task) = watchdog::new(store.clone(), options.lease, service.clone());
    let watchdog_task = tokio::spawn(watchdog_task);
    let (stop_tx, stop_rx) = watch::channel(None);
    watchdog.send(watchdog::Command::Hold(LeaseHold {
        job: Keys::lock_job(&options.name),
        run_id: run_id.to_string(),
        tick_ms: 0,
        fence: held.fence,
        lease_key: held.lease_key,
        replica: options.holder.clone(),
        valid_from: held.valid_from,
        stop: stop_tx,
    }));
    let context = RunContext {
        job: Keys::lock_job(&options.name),
        tick_ms: 0,
        fence: held.fence,
        run_id: run_id.to_string(),
        replica: options.holder.clone(),
        attempt: 0,
        grace: options.kill_grace,
    };
    let once = Attempts {
        timeout: None,
        retries: 0,
        retry_backoff: Duration::ZERO,
        output_tail_bytes: 0,
    };
    let run = task::execute(process, context, once, stop_rx);
    tokio::pin!(run);
    let result = tokio::select! {
        result = &mut run => result,
        () = shutdown.cancelled() => {
            watchdog.send(watchdog::Command::StopAll(Stop::Shutdown));
            run.await
        }
    };
    let (done_tx, done_rx) = oneshot::channel();
    watchdog.send(watchdog::Command::Release {
        run_id: run_id.to_string(),
        done: done_tx,
    });
    let _ = done_rx.await;
    service.cancel();
    let _ = watchdog_task.await;
    result
}

/// Takes the lock, waiting if asked; `None` if it was not acquired.
async fn acquire(
    store: &Store,
    options: &LockOptions,
    run_id: &str,
    shutdown: &CancellationToken,
) -> Result<Option<Held>, LockError> {
    let deadline = options.wait.map(|wait| Instant::now() + wait);
    let mut waiter = None;
    loop {
        let sent = Instant::now();
        let reply = store
            .lock_acquire(
                &options.name,
                run_id,
                options.lease,
                &options.holder,
                &options.host,
            )
            .await?;
        let (holder, ttl_ms) = match reply {
            LockReply::Acquired { fence, lease_key } => {
                return Ok(Some(Held {
                    fence,
                    lease_key,
                    valid_from: sent,
                }));
            }
            LockReply::Held { holder, ttl_ms } => (holder, ttl_ms),
        };
        let Some(deadline) = deadline.filter(|d| Instant::now() < *d) else {
            eprintln!(
                "cronlease lock: lock {:?} is held by {holder}",
                options.name
            );
            return Ok(None);
        };
        if waiter.is_none() {
            // Subscribe, then ask again: a release between the two is not missed.
            waiter = Some(store.lock_waiter(&options.name).await?);
            continue;
        }
        let pubsub = waiter
            .as_mut()
            .expect("the waiter was subscribed just above");
        let lapse =
            Instant::now() + Duration::from_millis(u64::try_from(ttl_ms).unwrap_or(0).max(1));
        tracing::debug!(lock = %options.name, %holder, ttl_ms, "waiting for the lock");
        let mut messages = pubsub.on_message();
        tokio::select! {
            _ = messages.next() => {}
            () = sleep_until(lapse) => {}
            () = sleep_until(deadline) => {}
            () = shutdown.cancelled() => return Ok(None),
        }
        // A message may arrive just before the lock is free to take; a
        // breath avoids a busy loop on a flood of releases.
        sleep(Duration::from_millis(1)).await;
    }
}
