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
        let r = Reply::new(reply, "lock")?;
        match r.string(0)?.as_str() {
            "acquired" => Ok(LockReply::Acquired {
                fence: r.fence(1)?,
                lease_key: r.string(2)?,
            }),
            "held" => Ok(LockReply::Held {
                holder: r.string_or_empty(1),
                ttl_ms: r.int_or(2, 0),
            }),
            _ => Err(r.bad()),
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
