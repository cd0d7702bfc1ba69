//! The cluster locks of `cronlease lock NAME`: acquire and release scripts
//! (a lock is the pseudo-job `lock:NAME`), and the release channel waiters
//! sleep on.

use std::time::Duration;

use redis::Value;

use super::*;

/// How long the keys of a lock (`cronlease lock NAME`) live after its last
/// acquisition: a lock name used once does not stay in Redis for ever.
pub const LOCK_IDLE_TTL: Duration = Duration::from_secs(30 * 24 * 3600);

/// What the lock script did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LockReply {
    Acquired { fence: u64, lease_key: String },
    Held { holder: String, ttl_ms: i64 },
}

impl Store {
    /// Tries to take lock `name`.
    pub async fn lock_acquire(
        &self,
        name: &str,
        run_id: &str,
        lease: Duration,
        holder: &str,
        host: &str,
    ) -> Result<LockReply, StoreError> {
        let job = Keys::lock_job(name);
        let mut conn = self.single("`cronlease lock`").await?;
        let reply: Value = self
            .scripts
            .lock_acquire
            .key(self.keys.state(&job))
            .key(self.keys.running(&job))
            .key(self.keys.lease(&job))
            .arg(run_id)
            .arg(duration_ms(lease))
            .arg(holder)
            .arg(host)
            .arg(duration_ms(LOCK_IDLE_TTL))
            .invoke_async(&mut conn)
            .await?;
        let items = as_array(reply, "lock")?;
        let bad = || protocol("lock", &Value::Array(items.clone()));
        match items.first().and_then(as_string).as_deref() {
            Some("acquired") => Ok(LockReply::Acquired {
                fence: items.get(1).and_then(as_int).ok_or_else(bad)? as u64,
                lease_key: items.get(2).and_then(as_string).ok_or_else(bad)?,
            }),
            Some("held") => Ok(LockReply::Held {
                holder: items.get(1).and_then(as_string).unwrap_or_default(),
                ttl_ms: items.get(2).and_then(as_int).unwrap_or(0),
            }),
            _ => Err(bad()),
        }
    }

    /// Releases lock `name` if `run_id` holds it, waking waiters.
    pub async fn lock_release(&self, name: &str, run_id: &str) -> Result<bool, StoreError> {
        let job = Keys::lock_job(name);
        let mut conn = self.single("`cronlease lock`").await?;
        let released: i64 = self
            .scripts
            .lock_release
            .key(self.keys.running(&job))
            .key(self.keys.lease(&job))
            .arg(run_id)
            .arg(self.keys.lock_channel(name))
            .invoke_async(&mut conn)
            .await?;
        Ok(released == 1)
    }

    /// A pub/sub connection subscribed to lock `name`'s release channel.
    pub async fn lock_waiter(&self, name: &str) -> Result<redis::aio::PubSub, StoreError> {
        let [node] = &*self.nodes else {
            return Err(StoreError::QuorumUnsupported {
                what: "`cronlease lock`",
            });
        };
        let mut pubsub = node.link.pubsub().await?;
        pubsub.subscribe(self.keys.lock_channel(name)).await?;
        Ok(pubsub)
    }
}
