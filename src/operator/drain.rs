//! `cronlease drain` and `cronlease undrain`: a replica out of the
//! rendezvous (it claims nothing, the others take its ticks, its runs in
//! flight go on) and back in; and the wait until it has no run in flight.

use std::time::Duration;

use super::OperatorError;
use crate::membership::{DrainState, Heartbeat, RunInFlight};
use crate::store::{DrainChange, Store};

/// What a drain or an undrain did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DrainDone {
    /// Redis ms it was recorded at.
    pub at_ms: i64,
    /// Whether the replica's mark changed (draining a drained replica
    /// changes nothing but the record of the action).
    pub changed: bool,
}

/// How a wait for a drained replica ended.
#[derive(Debug, Clone, PartialEq)]
pub enum DrainWait {
    /// Its heartbeat says drained: no run in flight.
    Drained,
    /// It has no heartbeat record (stopped, or never started): it runs
    /// nothing.
    Gone,
    /// Still draining at the timeout: these runs were in flight.
    TimedOut { runs: Vec<RunInFlight> },
    /// Its heartbeat went silent (at Redis time `now_ms`) before it said
    /// drained.
    Silent { last_seen_ms: i64 },
}

/// Drains `replica` (one `status` lists, or one drained already) as `who`:
/// from its next heartbeat (told at once) it claims nothing and the
/// others rank without it. It stays drained across its restarts until
/// [`undrain`]. The action is recorded in the cluster's actions.
///
/// ```no_run
/// # async fn f(store: cronlease::store::Store) -> Result<(), cronlease::operator::OperatorError> {
/// let done = cronlease::operator::drain(&store, "web-1", "ops@bastion").await?;
/// assert!(done.at_ms > 0);
/// # Ok(()) }
/// ```
pub async fn drain(store: &Store, replica: &str, who: &str) -> Result<DrainDone, OperatorError> {
    require_replica(store, replica).await?;
    let (at_ms, changed) = store.set_drain(replica, DrainChange::Drain, who).await?;
    Ok(DrainDone { at_ms, changed })
}

/// Puts `replica` back in the rendezvous: it claims again from its next
/// heartbeat (told at once).
///
/// ```no_run
/// # async fn f(store: cronlease::store::Store) -> Result<(), cronlease::operator::OperatorError> {
/// cronlease::operator::undrain(&store, "web-1", "ops@bastion").await?;
/// # Ok(()) }
/// ```
pub async fn undrain(store: &Store, replica: &str, who: &str) -> Result<DrainDone, OperatorError> {
    require_replica(store, replica).await?;
    let (at_ms, changed) = store.set_drain(replica, DrainChange::Undrain, who).await?;
    Ok(DrainDone { at_ms, changed })
}

/// How often [`wait_drained`] reads the replica's heartbeat.
const POLL: Duration = Duration::from_millis(100);

/// Waits until `replica`'s heartbeat says drained (no run in flight), at
/// most `timeout`.
pub async fn wait_drained(
    store: &Store,
    replica: &str,
    timeout: Duration,
) -> Result<DrainWait, OperatorError> {
    let end = tokio::time::Instant::now() + timeout;
    loop {
        let now_ms = store.server_time_ms().await?;
        let records = store.hash(&store.keys().replicas()).await?;
        let Some((_, raw)) = records.iter().find(|(id, _)| id == replica) else {
            return Ok(DrainWait::Gone);
        };
        let record = Heartbeat::parse_without_hashes(raw).map_err(|e| {
            OperatorError::BadReplica(format!(
                "the heartbeat record of replica {replica:?} in Redis is unreadable: {e}"
            ))
        })?;
        if record.drain == Some(DrainState::Drained) {
            return Ok(DrainWait::Drained);
        }
        if !record.is_alive(now_ms) {
            return Ok(DrainWait::Silent {
                last_seen_ms: record.last_seen_ms,
            });
        }
        if tokio::time::Instant::now() >= end {
            return Ok(DrainWait::TimedOut { runs: record.runs });
        }
        tokio::time::sleep(POLL).await;
    }
}

/// A replica `status` lists (it has a heartbeat record) or one an operator
/// drained; else an error naming the replicas there are.
async fn require_replica(store: &Store, replica: &str) -> Result<(), OperatorError> {
    let records = store.hash(&store.keys().replicas()).await?;
    let drained = store.drained().await?;
    if records.iter().any(|(id, _)| id == replica) || drained.contains_key(replica) {
        return Ok(());
    }
    let mut known: Vec<&str> = records.iter().map(|(id, _)| id.as_str()).collect();
    known.sort_unstable();
    Err(OperatorError::BadReplica(format!(
        "unknown replica {replica:?}: no heartbeat record and no drain of it in Redis (replicas: {})",
        if known.is_empty() {
            "none".to_string()
        } else {
            known.join(", ")
        }
    )))
}
