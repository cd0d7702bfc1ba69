//! How a background task driven by pub/sub waits: for a message on its
//! subscription (if it has one), for its next periodic visit, or for its
//! cancellation, whichever comes first. The notifier and the chains'
//! follower wait this way; a lost subscription is said, so that they
//! subscribe again while their visits go on.

use futures_util::{Stream, StreamExt};
use redis::Msg;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

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
