//! The spool courier: delivers outcomes that could not reach Redis when
//! their run ended (one file each in `state_dir/spool`), as soon as Redis
//! answers again; and those the spool could not take either (a full or
//! failing disk, or a spool at `spool_max_bytes`), which wait in memory and
//! go to Redis or the disk, whichever takes them first.
//!
//! Every spool call that touches the disk runs in `spawn_blocking`, awaited:
//! no fsync, no directory listing and no file read runs on an async worker.
//! The spool's size is counted in memory, so spooling an outcome and
//! setting the gauge never read the directory; only a delivery does.

use super::ctx::{RunHandle, RunSide};
use crate::outcome::Outcome;
use crate::spool::Spool;
use crate::spool::SpoolError;
use crate::store::Attempt;
use crate::store::{FinishReply, Recorded, StoreError};
use crate::telemetry;
use std::time::Duration;
use tokio::time::sleep;
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info, warn};

use std::path::PathBuf;

use crate::spool::SaveError;

/// Sets the spooled-outcomes gauge from the spool's count (no file system
/// call).
pub(super) fn count_spooled(side: &RunSide<'_>) {
    metrics::gauge!(telemetry::SPOOLED).set(side.runs.spool.len() as f64);
}

/// Sets the gauge of outcomes held in memory.
fn count_unspooled(held: usize) {
    metrics::gauge!(telemetry::UNSPOOLED).set(held as f64);
}

/// Runs `f` on the spool on a blocking thread and waits for it. A panic
/// there (or a runtime going away) comes back as an error of the spool's
/// directory, so the caller keeps what it was writing.
async fn off_workers<T, E>(
    spool: &Spool,
    f: impl FnOnce(&Spool) -> Result<T, E> + Send + 'static,
) -> Result<T, E>
where
    T: Send + 'static,
    E: From<SpoolError> + Send + 'static,
{
    let spool = spool.clone();
    match tokio::task::spawn_blocking(move || f(&spool)).await {
        Ok(result) => result,
        Err(e) => Err(E::from(SpoolError {
            path: PathBuf::new(),
            source: std::io::Error::other(format!("the spool's blocking task failed: {e}")),
        })),
    }
}

/// Saves `outcome` to the spool off the async workers.
async fn save(side: &RunSide<'_>, outcome: &Outcome) -> Result<PathBuf, SaveError> {
    let copy = outcome.clone();
    off_workers(&side.runs.spool, move |spool| spool.save(&copy)).await
}

/// Spools `outcome`, or, when the spool refuses it (the disk, or the cap),
/// keeps it in memory for the courier to retry: nothing is lost while the
/// process lives.
pub(super) async fn spool_or_hold(side: &RunSide<'_>, outcome: Outcome) {
    match save(side, &outcome).await {
        Ok(path) => {
            warn!(job = %outcome.job, run_id = %outcome.run_id, path = %path.display(), "Redis unreachable; outcome spooled");
            count_spooled(side);
        }
        Err(SaveError::Full {
            held,
            needed,
            max_bytes,
        }) => {
            metrics::counter!(telemetry::SPOOL_FULL).increment(1);
            error!(
                job = %outcome.job, run_id = %outcome.run_id, spool_max_bytes = max_bytes,
                spooled_bytes = held, outcome_bytes = needed,
                outcome = %serde_json::to_string(&outcome).unwrap_or_default(),
                "SPOOL FULL: the outcome is not written to disk (Redis unreachable, and the spool holds spool_max_bytes); kept in memory and retried, and written here in full; it is lost if this replica dies before Redis or the spool takes it"
            );
            hold(side, outcome);
        }
        Err(SaveError::Write(e)) => {
            error!(
                job = %outcome.job, run_id = %outcome.run_id, error = %e,
                "CANNOT SPOOL THE OUTCOME (Redis unreachable, and the disk refused it): kept in memory and retried; it is lost if this replica dies before Redis or the disk takes it"
            );
            hold(side, outcome);
        }
    }
    side.runs.spooled.notify_one();
}

/// Keeps `outcome` in memory for the courier.
fn hold(side: &RunSide<'_>, outcome: Outcome) {
    let mut held = side
        .runs
        .unspooled
        .lock()
        .expect("unspooled mutex poisoned: a panic while pushing to a Vec");
    held.push(outcome);
    count_unspooled(held.len());
}

pub(super) async fn spool_courier(handle: RunHandle, cancel: CancellationToken) {
    let side = handle.side();
    loop {
        deliver_held(&side).await;
        deliver_spooled(&side).await;
        count_spooled(&side);
        tokio::select! {
            () = cancel.cancelled() => break,
            () = side.runs.spooled.notified() => {}
            () = side.redis.back.notified() => {}
            () = sleep(Duration::from_secs(2)) => {}
        }
    }
    // The last chance of what is only in memory.
    deliver_held(&side).await;
    let held = std::mem::take(
        &mut *side
            .runs
            .unspooled
            .lock()
            .expect("unspooled mutex poisoned: a panic while pushing to a Vec"),
    );
    for outcome in held {
        error!(
            job = %outcome.job, run_id = %outcome.run_id,
            outcome = %serde_json::to_string(&outcome).unwrap_or_default(),
            "OUTCOME LOST at shutdown: neither Redis nor the disk took it; it is only in this log"
        );
    }
}

/// Outcomes held in memory: to Redis if it answers, else to the spool if
/// it takes them now (the disk is back, deliveries made room); the rest
/// stay held.
async fn deliver_held(side: &RunSide<'_>) {
    let held = std::mem::take(
        &mut *side
            .runs
            .unspooled
            .lock()
            .expect("unspooled mutex poisoned: a panic while pushing to a Vec"),
    );
    if held.is_empty() {
        return;
    }
    let mut still = Vec::new();
    let mut redis_away = false;
    for outcome in held {
        if !redis_away {
            if finish_again(side, &outcome).await.is_ok() {
                info!(job = %outcome.job, run_id = %outcome.run_id, "outcome held in memory delivered");
                continue;
            }
            redis_away = true;
        }
        match save(side, &outcome).await {
            Ok(path) => {
                info!(job = %outcome.job, run_id = %outcome.run_id, path = %path.display(), "outcome held in memory spooled")
            }
            Err(_) => still.push(outcome),
        }
    }
    if !still.is_empty() {
        error!(
            held = still.len(),
            "outcomes still held in memory: Redis is unreachable and the spool refuses them"
        );
    }
    let mut held = side
        .runs
        .unspooled
        .lock()
        .expect("unspooled mutex poisoned: a panic while pushing to a Vec");
    held.extend(still);
    count_unspooled(held.len());
}

/// Delivers spooled outcomes until the spool is empty or Redis fails. The
/// directory is read only when the spool's count says it holds something;
/// each file is read when its turn comes, so a Redis still away costs one
/// listing and one file.
pub(super) async fn deliver_spooled(side: &RunSide<'_>) {
    if side.runs.spool.is_empty() {
        return;
    }
    let listing = match off_workers(&side.runs.spool, Spool::listing).await {
        Ok(listing) => listing,
        Err(e) => {
            error!(error = %e, "cannot read the spool");
            return;
        }
    };
    for path in listing {
        let read = {
            let path = path.clone();
            off_workers(&side.runs.spool, move |spool| spool.read(&path)).await
        };
        let outcome = match read {
            Ok(outcome) => outcome,
            Err(e) => {
                match side.runs.spool.quarantine(&path) {
                    Ok(to) => {
                        error!(error = %e, quarantined = %to.display(), "unreadable spooled outcome moved to the spool's quarantine")
                    }
                    Err(q) => {
                        error!(error = %e, quarantine_error = %q, "unreadable spooled outcome, and it cannot be moved aside")
                    }
                }
                continue;
            }
        };
        if finish_again(side, &outcome).await.is_err() {
            return;
        }
        info!(job = %outcome.job, run_id = %outcome.run_id, "spooled outcome delivered");
        if let Err(e) = side.runs.spool.remove(&path) {
            error!(error = %e, "cannot remove a delivered outcome from the spool");
        }
    }
}

/// Sends an outcome that was sent before (held in memory, or spooled) to
/// the finish script again, with its job's notification rules, and notes
/// whether Redis answered; logs how it was recorded.
async fn finish_again(side: &RunSide<'_>, outcome: &Outcome) -> Result<(), StoreError> {
    let notices = side.notices_of(&outcome.job);
    let slot = side.group_slot_of(&outcome.job);
    let history = side.config.daemon.history;
    match side
        .store
        .finish(outcome, history, None, Attempt::Again, (&notices, slot))
        .await
    {
        Ok(reply) => {
            side.redis.answered();
            log_finish(outcome, &reply);
            Ok(())
        }
        Err(e) => {
            side.redis.failed(&e);
            Err(e)
        }
    }
}

/// Logs how Redis recorded an outcome: current, or stale and why.
pub(super) fn log_finish(outcome: &Outcome, reply: &FinishReply) {
    let (run_id, id) = (&outcome.run_id, &reply.id);
    match reply.recorded {
        Recorded::Current => debug!(%run_id, stream_id = %id, "outcome recorded"),
        Recorded::Restored => warn!(
            job = %outcome.job, %run_id, stream_id = %id,
            "outcome recorded as current: Redis lost this job's state while the run was in flight, so no other record of it exists"
        ),
        Recorded::Stale => warn!(
            job = %outcome.job, %run_id, stream_id = %id,
            "outcome recorded as stale: the run was no longer in flight in Redis (its lease lapsed and it was recorded abandoned, or this outcome was delivered before)"
        ),
        Recorded::Duplicate => debug!(%run_id, stream_id = %id, "outcome was already recorded"),
    }
}
