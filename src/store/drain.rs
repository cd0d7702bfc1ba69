//! Drained replicas (`cronlease drain`): the operator's mark per replica in
//! `Keys::drain`, read by every replica at each heartbeat, and the notice
//! on the claims channel that wakes their heartbeats at once. Each drain
//! and undrain is also an entry of the cluster's actions stream.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{Store, StoreError};

/// The start of the message on the claims channel that tells the replicas
/// a drain changed (then the replica's id): not a claim announcement
/// (`<job> <tick> <fence>`), since no job name holds `!`.
pub const DRAIN_NOTICE: &str = "!drain ";

/// An operator's drain of one replica, as `Keys::drain` holds it.
///
/// ```
/// use cronlease::store::DrainMark;
/// let mark = DrainMark { by: "ops@web-1".into(), at_ms: 1_767_225_600_000 };
/// assert_eq!(DrainMark::parse(&mark.to_json()), Some(mark));
/// assert_eq!(DrainMark::parse("not json"), None);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "dashboard", derive(utoipa::ToSchema))]
pub struct DrainMark {
    /// Who drained it: `user@host`, or the dashboard's operator.
    pub by: String,
    /// Redis ms of the drain.
    pub at_ms: i64,
}

impl DrainMark {
    /// The mark in `raw`, if it reads as one cronlease wrote.
    pub fn parse(raw: &str) -> Option<DrainMark> {
        serde_json::from_str(raw).ok()
    }

    /// The mark as stored.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("a drain mark is a string and a number")
    }
}

/// Whether [`Store::set_drain`] drains or undrains.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DrainChange {
    Drain,
    Undrain,
}

impl Store {
    /// Drains `replica` (or undrains it), records the action in the
    /// cluster's actions stream, and tells the replicas; returns the
    /// Redis time it happened and whether the replica's mark changed.
    pub async fn set_drain(
        &self,
        replica: &str,
        change: DrainChange,
        who: &str,
    ) -> Result<(i64, bool), StoreError> {
        let at_ms = self.server_time_ms().await?;
        let cmd = match change {
            DrainChange::Drain => {
                let mut cmd = redis::cmd("HSET");
                cmd.arg(self.keys.drain()).arg(replica).arg(
                    DrainMark {
                        by: who.to_string(),
                        at_ms,
                    }
                    .to_json(),
                );
                cmd
            }
            DrainChange::Undrain => {
                let mut cmd = redis::cmd("HDEL");
                cmd.arg(self.keys.drain()).arg(replica);
                cmd
            }
        };
        let before = self.drained().await?.contains_key(replica);
        self.write_everywhere("drain", cmd).await?;
        let action = match change {
            DrainChange::Drain => "drain",
            DrainChange::Undrain => "undrain",
        };
        let mut record = redis::cmd("XADD");
        record
            .arg(self.keys.pause_all_actions())
            .arg("MAXLEN")
            .arg("~")
            .arg(200)
            .arg("*")
            .arg("action")
            .arg(action)
            .arg("who")
            .arg(who)
            .arg("detail")
            .arg(replica);
        self.write_everywhere("drain (recording it)", record)
            .await?;
        self.announce_drain(replica).await?;
        let changed = before != (change == DrainChange::Drain);
        Ok((at_ms, changed))
    }

    /// Tells the replicas that `replica`'s drain state changed: they read
    /// the records again at once.
    pub async fn announce_drain(&self, replica: &str) -> Result<(), StoreError> {
        let mut notice = redis::cmd("PUBLISH");
        notice
            .arg(self.keys.claims_channel())
            .arg(format!("{DRAIN_NOTICE}{replica}"));
        self.write_everywhere("drain (telling the replicas)", notice)
            .await
    }

    /// Every replica an operator drained, with the mark; a mark that does
    /// not read as one cronlease wrote still drains its replica (named in
    /// a warning, with an empty `by`).
    pub async fn drained(&self) -> Result<BTreeMap<String, DrainMark>, StoreError> {
        Ok(parse_drained(self.hash(&self.keys.drain()).await?))
    }
}

/// The drained replicas in an HGETALL of `Keys::drain`.
pub(super) fn parse_drained(fields: Vec<(String, String)>) -> BTreeMap<String, DrainMark> {
    fields
        .into_iter()
        .map(|(replica, raw)| {
            let mark = DrainMark::parse(&raw).unwrap_or_else(|| {
                tracing::warn!(%replica, "unreadable drain mark in Redis; the replica is taken as drained");
                DrainMark {
                    by: String::new(),
                    at_ms: 0,
                }
            });
            (replica, mark)
        })
        .collect()
}
