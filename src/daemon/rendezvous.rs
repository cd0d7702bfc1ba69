//! Rendezvous claims: every replica ranks the live replicas for each
//! (job, tick) by a hash, so one claims at once and the others wait their
//! turn, skipping the claim if one was announced meanwhile; and the
//! listener of those announcements.

use super::*;

/// How long each rank waits after the one before it for a claim to be
/// announced: also the takeover delay when the preferred replica is gone.
pub(super) const RANK_STEP: Duration = Duration::from_millis(100);

/// Ranks beyond this wait no longer (they all claim together).
pub(super) const MAX_RANK_WAIT: usize = 3;

/// A 64-bit score of (replica, job, tick); the highest score claims first.
pub(super) fn rendezvous_score(replica: &str, job: &str, tick_ms: i64) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in replica
        .bytes()
        .chain([0])
        .chain(job.bytes())
        .chain([0])
        .chain(tick_ms.to_le_bytes())
    {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    // splitmix64's finalizer: FNV alone mixes the last bytes poorly.
    hash ^= hash >> 30;
    hash = hash.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    hash ^= hash >> 27;
    hash = hash.wrapping_mul(0x94d0_49bb_1331_11eb);
    hash ^ (hash >> 31)
}

/// Listens to the claims channel and remembers, per job, the highest tick
/// announced. Reconnects on its own; a gap only costs extra claims.
pub(super) async fn claims_listener(ctx: Arc<Ctx>, cancel: CancellationToken) {
    use futures_util::StreamExt;
    loop {
        let mut pubsub = match ctx.store.claims_subscriber().await {
            Ok(pubsub) => pubsub,
            Err(e) => {
                debug!(error = %e, "cannot subscribe to claim announcements yet");
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
            let Ok(payload) = message.get_payload::<String>() else {
                continue;
            };
            // "<job> <tick> <fence>"; job names have no spaces.
            let mut parts = payload.split(' ');
            let (Some(job), Some(tick), Some(fence)) = (parts.next(), parts.next(), parts.next())
            else {
                continue;
            };
            let (Ok(tick), Ok(fence)) = (tick.parse::<i64>(), fence.parse::<u64>()) else {
                continue;
            };
            // Every fence handed out is remembered, whoever won the tick:
            // after a Redis state loss no replica re-issues one.
            ctx.marks.note(job, Some(tick), Some(fence));
            ctx.announced.record(job, tick);
        }
        if !pause(Duration::from_millis(200), &cancel).await {
            return;
        }
    }
}
