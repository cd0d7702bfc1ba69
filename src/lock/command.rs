//! `cronlease lock NAME -- CMD`, the `flock(1)` of a cluster: takes the
//! lock through the library's [`LockBuilder`], runs the command under the
//! guard's lease (killed at once if it is lost), releases the lock.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::keeper::Keeper;
use super::{Acquisition, LockBuilder, LockError, LockGuard, Wait};
use crate::exit::Exit;
use crate::outcome::Status;
use crate::runner::{Process, RunEnv, StdioMode};
use crate::store::{Keys, LockHolderTag, Store};
use crate::task::{self, Attempts, RunContext, RunResult, Stop};

/// Why `cronlease lock` could not run its command.
#[derive(Debug, thiserror::Error)]
pub enum CommandError {
    #[error(transparent)]
    Lock(#[from] LockError),
    #[error("cannot read the current directory: {0}")]
    Workdir(std::io::Error),
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
    /// The command's environment as a job's run gets it (an allowlist of
    /// the caller's variables, never its secrets); the lock's
    /// `CRONLEASE_*` variables are added when it is held.
    pub env: RunEnv,
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
) -> Result<Exit, CommandError> {
    // Read before the lock is taken: an error then leaves nothing held.
    let workdir = std::env::current_dir().map_err(CommandError::Workdir)?;
    let keeper = Keeper::new(store);
    // For the record's `since`, in Redis time.
    keeper.sync_clock().await.map_err(LockError::from)?;
    let builder = LockBuilder::new(
        keeper,
        &options.name,
        Arc::new(LockHolderTag::new(&options.holder, &options.host)),
    )
    .lease(options.lease);
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
        env: RunEnv {
            run: vec![
                ("CRONLEASE_LOCK".to_string(), options.name.clone()),
                ("CRONLEASE_FENCE".to_string(), guard.fence.to_string()),
                (
                    "CRONLEASE_RUN_ID".to_string(),
                    guard.hold.ticket.run_id().to_string(),
                ),
            ],
            ..options.env.clone()
        },
        stdio: StdioMode::Inherit,
        // The lock's holder: a cgroup of its own where there are cgroups.
        containment: crate::runner::Containment::detect(
            &format!("lock-{}", std::process::id()),
            crate::config::ContainmentSetting::Auto,
        ),
        leftovers: crate::config::Leftovers::Kill,
        limits: crate::config::Limits::default(),
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
        run_id: guard.hold.ticket.run_id().to_string(),
        replica: guard.holder.holder().to_string(),
        attempt: 0,
        grace: options.kill_grace,
        upstream: None,
        trigger: crate::outcome::Trigger::Manual,
        params: Default::default(),
        live: crate::live::LiveLines::off(),
        trace: None,
    };
    let once = Attempts {
        timeout: None,
        retries: 0,
        retry_backoff: Duration::ZERO,
        output_tail_bytes: 0,
    };
    let (stop, stopped) = watch::channel(None);
    let run = task::execute(process, context, once, stopped);
    tokio::pin!(run);
    tokio::select! {
        result = &mut run => return result,
        () = guard.lost() => {
            stop.send_replace(Some(Stop::LostLease));
            return run.await;
        }
        () = shutdown.cancelled() => {
            stop.send_replace(Some(Stop::Shutdown));
        }
    }
    // Interrupted: while the command stops, a lease lost meanwhile still
    // kills it at once.
    tokio::select! {
        result = &mut run => result,
        () = guard.lost() => {
            stop.send_replace(Some(Stop::LostLease));
            run.await
        }
    }
}
