//! The spool courier: delivers outcomes that could not reach Redis when
//! their run ended (one file each in `state_dir/spool`), as soon as Redis
//! answers again.

use super::*;

/// Sets the spooled-outcomes gauge from the spool directory.
pub(super) fn count_spooled(ctx: &Ctx) {
    if let Ok(pending) = ctx.spool.pending() {
        metrics::gauge!(telemetry::SPOOLED).set(pending.len() as f64);
    }
}

pub(super) async fn spool_courier(ctx: Arc<Ctx>, cancel: CancellationToken) {
    loop {
        deliver_spooled(&ctx).await;
        count_spooled(&ctx);
        tokio::select! {
            () = cancel.cancelled() => return,
            () = ctx.spooled.notified() => {}
            () = sleep(Duration::from_secs(2)) => {}
        }
    }
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
                error!(error = %e, "unreadable spooled outcome left in place");
                continue;
            }
        };
        match ctx
            .store
            .finish(&outcome, ctx.config.daemon.history, None)
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
