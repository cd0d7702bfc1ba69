//! The holder's side of `cronlease kill`: a subscription to the kill
//! channel, on which kill.lua publishes the id of each run asked to stop.
//! A run this replica holds is stopped at once with
//! [`Stop::Killed`](crate::Stop::Killed); the others' ids are ignored.
//! A message lost (no subscription at the time, a dropped connection)
//! delays the stop to the run's next lease renewal, which reads the
//! request from the run's entry in Redis (renew.lua).

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt as _;
use tokio_util::sync::CancellationToken;
use tracing::debug;

use super::ctx::Ctx;
use super::time::pause;

/// Listens for kill requests until `cancel`; subscribes again after a
/// lost subscription.
pub(super) async fn kill_listener(ctx: Arc<Ctx>, cancel: CancellationToken) {
    loop {
        let mut pubsub = match ctx.store.kill_subscriber().await {
            Ok(pubsub) => pubsub,
            Err(e) => {
                debug!(error = %e, "cannot subscribe to kill requests yet");
                if !pause(Duration::from_secs(1), &cancel).await {
                    return;
                }
                continue;
            }
        };
        let mut messages = pubsub.on_message();
        loop {
            let message = tokio::select! {
                () = cancel.cancelled() => return,
                message = messages.next() => message,
            };
            let Some(message) = message else { break };
            if let Ok(run_id) = message.get_payload::<String>() {
                ctx.runs.watchdog.kill(&run_id);
            }
        }
        if !pause(Duration::from_millis(200), &cancel).await {
            return;
        }
    }
}
