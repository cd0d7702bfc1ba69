//! The spool courier: delivers outcomes that could not reach Redis when
//! their run ended (one file each in `state_dir/spool`), as soon as Redis
//! answers again; and those the spool could not take either (a full or
//! failing disk), which wait in memory and go to Redis or the disk,
//! whichever takes them first.

use super::*;

/// Sets the spooled-outcomes gauge from the spool directory.
pub(super) fn count_spooled(ctx: &Ctx) {
    if let Ok(pending) = ctx.spool.pending() {
        metrics::gauge!(telemetry::SPOOLED).set(pending.len() as f64);
    }
}

/// Sets the gauge of outcomes held in memory.
fn count_unspooled(held: usize) {
    metrics::gauge!(telemetry::UNSPOOLED).set(held as f64);
}

/// Spools `outcome`, or, when the disk refuses, keeps it in memory for the
/// courier to retry: nothing is lost while the process lives.
pub(super) fn spool_or_hold(ctx: &Ctx, outcome: Outcome) {
    match ctx.spool.save(&outcome) {
        Ok(path) => {
            warn!(job = %outcome.job, run_id = %outcome.run_id, path = %path.display(), "Redis unreachable; outcome spooled");
            count_spooled(ctx);
        }
        Err(e) => {
            error!(
                job = %outcome.job, run_id = %outcome.run_id, error = %e,
                "CANNOT SPOOL THE OUTCOME (Redis unreachable, and the disk refused it): kept in memory and retried; it is lost if this replica dies before Redis or the disk takes it"
            );
            let mut held = ctx.unspooled.lock().expect("unspooled mutex poisoned: a panic while pushing to a Vec");
            held.push(outcome);
            count_unspooled(held.len());
        }
    }
    ctx.spooled.notify_one();
}

pub(super) async fn spool_courier(ctx: Arc<Ctx>, cancel: CancellationToken) {
    loop {
        deliver_held(&ctx).await;
        deliver_spooled(&ctx).await;
        count_spooled(&ctx);
        tokio::select! {
            () = cancel.cancelled() => break,
            () = ctx.spooled.notified() => {}
            () = sleep(Duration::from_secs(2)) => {}
        }
    }
    // The last chance of what is only in memory.
    deliver_held(&ctx).await;
    let held = std::mem::take(&mut *ctx.unspooled.lock().expect("unspooled mutex poisoned: a panic while pushing to a Vec"));
    for outcome in held {
        error!(
            job = %outcome.job, run_id = %outcome.run_id,
            outcome = %serde_json::to_string(&outcome).unwrap_or_default(),
            "OUTCOME LOST at shutdown: neither Redis nor the disk took it; it is only in this log"
        );
    }
}

/// Outcomes held in memory: to Redis if it answers, else to the spool if
/// the disk takes them now; the rest stay held.
async fn deliver_held(ctx: &Ctx) {
    let held = std::mem::take(&mut *ctx.unspooled.lock().expect("unspooled mutex poisoned: a panic while pushing to a Vec"));
    if held.is_empty() {
        return;
    }
    let mut still = Vec::new();
    let mut redis_away = false;
    for outcome in held {
        if !redis_away {
            match ctx.store.finish(&outcome, ctx.config.daemon.history, None, Attempt::Again).await {
                Ok(reply) => {
                    ctx.redis_answered();
                    info!(job = %outcome.job, run_id = %outcome.run_id, "outcome held in memory delivered");
                    log_finish(&outcome, &reply);
                    continue;
                }
                Err(e) => {
                    ctx.redis_failed(&e);
                    redis_away = true;
                }
            }
        }
        match ctx.spool.save(&outcome) {
            Ok(path) => info!(job = %outcome.job, run_id = %outcome.run_id, path = %path.display(), "outcome held in memory spooled"),
            Err(_) => still.push(outcome),
        }
    }
    if !still.is_empty() {
        error!(held = still.len(), "outcomes still held in memory: Redis is unreachable and the disk refuses them");
    }
    let mut held = ctx.unspooled.lock().expect("unspooled mutex poisoned: a panic while pushing to a Vec");
    held.extend(still);
    count_unspooled(held.len());
}

/// Delivers spooled outcomes until the spool is empty or Redis fails.
pub(super) async fn deliver_spooled(ctx: &Ctx) {
    let pending = match ctx.spool.pending() {
        Ok(pending) => pending,
        Err(e) => {
            error!(error = %e, "cannot read the spool");
            return;
        }
    };
    for (path, outcome) in pending {
        let outcome = match outcome {
            Ok(outcome) => outcome,
            Err(e) => {
                match ctx.spool.quarantine(&path) {
                    Ok(to) => error!(error = %e, quarantined = %to.display(), "unreadable spooled outcome moved to the spool's quarantine"),
                    Err(q) => error!(error = %e, quarantine_error = %q, "unreadable spooled outcome, and it cannot be moved aside"),
                }
                continue;
            }
        };
        match ctx
            .store
            .finish(&outcome, ctx.config.daemon.history, None, Attempt::Again)
            .await
        {
            Ok(reply) => {
                ctx.redis_answered();
                info!(job = %outcome.job, run_id = %outcome.run_id, "spooled outcome delivered");
                log_finish(&outcome, &reply);
                if let Err(e) = ctx.spool.remove(&path) {
                    error!(error = %e, "cannot remove a delivered outcome from the spool");
                }
            }
            Err(e) => {
                ctx.redis_failed(&e);
                return;
            }
        }
    }
}
