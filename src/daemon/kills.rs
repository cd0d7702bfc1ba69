//! The holder's side of `cronlease kill`: a subscription to the kill
//! channel, on which kill.lua publishes the id of each run asked to stop.
//! A run this replica holds is stopped at once with
//! [`Stop::Killed`](crate::Stop::Killed); the others' ids are ignored.
//! A message lost (no subscription at the time, a dropped connection)
//! delays the stop to the run's next lease renewal, which reads the
//! request from the run's entry in Redis (renew.lua).

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::ctx::Ctx;
use super::wake::listen;

/// Listens for kill requests until `cancel`; subscribes again after a
/// lost subscription.
pub(super) async fn kill_listener(ctx: Arc<Ctx>, cancel: CancellationToken) {
    let subscribe = || ctx.store.kill_subscriber();
    listen(subscribe, "kill requests", &cancel, |run_id| {
        ctx.runs.watchdog.kill(&run_id);
    })
    .await;
}
