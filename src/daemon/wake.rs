//! How a background task driven by pub/sub waits: for a message on its
//! subscription (if it has one), for its next periodic visit, or for its
//! cancellation, whichever comes first. The notifier and the chains'
//! follower wait this way; a lost subscription is said, so that they
//! subscribe again while their visits go on. A task that only answers
//! messages (the claims and kill listeners) hands each text payload to
//! [`listen`], which subscribes again after a lost subscription.

use std::future::Future;
use std::time::Duration;

use futures_util::{Stream, StreamExt};
use redis::Msg;
use redis::aio::PubSub;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::debug;

use super::time::pause;
use crate::store::StoreError;

/// Calls `on_payload` with the text of each message of the subscription
/// `subscribe` makes, until `cancel`: subscribes again 1 s after a failed
/// attempt (`what` names it in the log), 200 ms after a lost one.
pub(super) async fn listen<F>(
    mut subscribe: impl FnMut() -> F,
    what: &str,
    cancel: &CancellationToken,
    mut on_payload: impl FnMut(String),
) where
    F: Future<Output = Result<PubSub, StoreError>>,
{
    loop {
        let mut pubsub = match subscribe().await {
            Ok(pubsub) => pubsub,
            Err(e) => {
                debug!(error = %e, "cannot subscribe to {what} yet");
                if !pause(Duration::from_secs(1), cancel).await {
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
            if let Ok(payload) = message.get_payload::<String>() {
                on_payload(payload);
            }
        }
        if !pause(Duration::from_millis(200), cancel).await {
            return;
        }
    }
}

/// What ended a wait.
pub(super) enum Woken {
    /// The task is to stop.
    Cancelled,
    /// The periodic visit is due.
    Due,
    /// A message, its payload when it is text.
    Message(Option<String>),
    /// The subscription ended: subscribe again.
    Unsubscribed,
}

/// Waits for a message on `messages` (none: no subscription, only the
/// other two), the instant `due` or `cancel`.
pub(super) async fn wait<S>(
    messages: Option<&mut S>,
    due: Instant,
    cancel: &CancellationToken,
) -> Woken
where
    S: Stream<Item = Msg> + Unpin,
{
    tokio::select! {
        () = cancel.cancelled() => Woken::Cancelled,
        () = tokio::time::sleep_until(due) => Woken::Due,
        message = async {
            match messages {
                Some(messages) => messages.next().await,
                None => std::future::pending().await,
            }
        } => match message {
            Some(message) => Woken::Message(message.get_payload::<String>().ok()),
            None => Woken::Unsubscribed,
        },
    }
}
