//! The cluster locks of `cronlease lock NAME` and the library: acquire,
//! renew and release scripts, the release channel waiters sleep on, and
//! who holds a lock. A lock is two keys of the pseudo-job `lock:NAME`: its
//! `lease` (the holder's run id, with the lease as its TTL) and its
//! `state` (the fence and the holder's record, see `lock_acquire.lua`).

use std::sync::Arc;
use std::time::Duration;

use std::time::Instant;

use redis::Value;
use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};

use super::*;

/// How long the keys of a lock (`cronlease lock NAME`) live after its last
/// acquisition: a lock name used once does not stay in Redis for ever.
pub const LOCK_IDLE_TTL: Duration = Duration::from_secs(30 * 24 * 3600);

/// Who holds a lock, as [`LockBuilder::info`](crate::LockBuilder::info)
/// read it from Redis (with `quorum`: from the first master that answers).
///
/// ```no_run
/// # async fn f(cluster: cronlease::Cluster) -> Result<(), cronlease::LockError> {
/// if let Some(holder) = cluster.lock("report").info().await? {
///     println!(
///         "{} on {} holds it (fence {}, {} hold(s)) since {} ms, {} ms left",
///         holder.holder, holder.host, holder.fence, holder.holds, holder.since_ms, holder.ttl_ms
///     );
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockHolder {
    /// Who holds it ([`crate::LockBuilder::holder`]; by default the
    /// instance's host name and pid).
    pub holder: String,
    /// The host it holds from.
    pub host: String,
    /// The fence of the acquisition that holds it.
    pub fence: u64,
    /// Redis time of the acquisition, ms since the Unix epoch.
    pub since_ms: i64,
    /// What is left of the lease, ms (renewals push it back up).
    pub ttl_ms: i64,
    /// Acquisitions not yet released (more than 1: re-entered).
    pub holds: u32,
}

/// What the lock script did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LockReply {
    Acquired {
        fence: u64,
    },
    /// Its holder asked again with the same run id (an owner): one more
    /// hold, the same fence.
    Reentered {
        fence: u64,
        holds: u32,
    },
    Held {
        /// The holder's run id.
        holder: String,
        ttl_ms: i64,
    },
}

impl LockReply {
    /// The fence of a grant (acquired or re-entered).
    pub fn granted(&self) -> Option<u64> {
        match self {
            LockReply::Acquired { fence } | LockReply::Reentered { fence, .. } => Some(*fence),
            LockReply::Held { .. } => None,
        }
    }
}

/// Whether a run id can hold a lock more than once: an owner's
/// ([`LockBuilder::owner`](crate::LockBuilder::owner)) re-enters and
/// counts its holds, any other run id is fresh for each acquisition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reentry {
    Owner,
    Once,
}

impl Reentry {
    fn as_arg(self) -> &'static str {
        match self {
            Reentry::Owner => "owner",
            Reentry::Once => "once",
        }
    }
}

/// The names of one lock and its keys, made once per acquisition and
/// shared by its renewals and release.
#[derive(Debug)]
pub struct LockKeys {
    name: String,
    state: String,
    lease: String,
    channel: String,
}

impl LockKeys {
    /// The lock's name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

/// One held lock's renewal, as the lock keeper sends it.
#[derive(Debug, Clone)]
pub struct LockRenewal {
    pub keys: Arc<LockKeys>,
    pub run_id: String,
    pub lease: Duration,
}


/// The lock script's reply.
pub(super) fn parse_lock(reply: Value) -> Result<LockReply, StoreError> {
    let r = Reply::new(reply, "lock")?;
    match r.string(0)?.as_str() {
        "acquired" => Ok(LockReply::Acquired { fence: r.fence(1)? }),
        "reentered" => Ok(LockReply::Reentered {
            fence: r.fence(1)?,
            holds: u32::try_from(r.int(2)?).map_err(|_| r.bad())?,
        }),
        "held" => Ok(LockReply::Held {
            holder: r.string_or_empty(1),
            ttl_ms: r.int_or(2, 0),
        }),
        _ => Err(r.bad()),
    }
}

/// A lock's holder record in its `state` hash: run id, holder, host, fence,
/// since (s, µs) and holds, as `lock_holder` reads them.
pub(super) type HolderRecord = [Option<String>; 7];

/// Who holds lock `name`, from the lease's run id, its time left and the
/// holder record; None when the lease is gone, an error naming the lock
/// when the record is not the holder's or does not read.
pub(super) fn parse_lock_holder(
    name: &str,
    run_id: Option<String>,
    ttl_ms: i64,
    record: HolderRecord,
) -> Result<Option<LockHolder>, StoreError> {
    let Some(run_id) = run_id else {
        return Ok(None);
    };
    let bad = |detail: &str| StoreError::Protocol {
        what: "lock holder",
        reply: format!("lock {name:?}, run {run_id}: {detail}"),
    };
    let [holder_run, holder, host, fence, since_s, since_us, holds] = record;
    if holder_run.as_deref() != Some(run_id.as_str()) {
        return Err(bad(
            "the lock's state has no record of this holder (taken by an older cronlease, which kept it in `running`?)",
        ));
    }
    let number = |field: &str, value: Option<String>| -> Result<i64, StoreError> {
        let value = value.unwrap_or_default();
        value
            .parse()
            .map_err(|_| bad(&format!("{field} is {value:?}, not a number")))
    };
    let fence = u64::try_from(number("fence", fence)?).map_err(|_| bad("a negative fence"))?;
    let since_ms = number("since_s", since_s)?
        .saturating_mul(1000)
        .saturating_add(number("since_us", since_us)? / 1000);
    Ok(Some(LockHolder {
        holder: holder.unwrap_or_default(),
        host: host.unwrap_or_default(),
        fence,
        since_ms,
        ttl_ms: ttl_ms.max(0),
        holds: u32::try_from(number("holds", holds)?).map_err(|_| bad("negative holds"))?,
    }))
}

impl Store {
    /// The key names of lock `name`.
    pub fn lock_keys(&self, name: &str) -> LockKeys {
        LockKeys {
            name: name.to_string(),
            state: self.keys.lock_key(name, "state"),
            lease: self.keys.lock_key(name, "lease"),
            channel: self.keys.lock_channel(name),
        }
    }

    /// Tries to take lock `name`. With `quorum`, the lock holds only if a
    /// majority of the masters granted it while its lease still had time
    /// left (RedLock's rule, the claim's rule): the fence is then raised
    /// to the highest on every master, and otherwise the grants are undone
    /// where they landed.
    pub async fn lock_acquire(
        &self,
        lock: &LockKeys,
        run_id: &str,
        reentry: Reentry,
        lease: Duration,
        holder: &str,
        host: &str,
    ) -> Result<LockReply, StoreError> {
        let sent = Instant::now();
        let replies = self
            .on_all_until_majority(
                |conn| async move {
                    self.lock_acquire_on(conn, lock, run_id, lease, holder, host)
                        .await
                },
                |reply| reply.granted().is_some(),
            )
            .await;
        if !self.is_quorum() {
            return replies
                .into_iter()
                .next()
                .unwrap_or_else(|| Err(unanswered()));
        }
        self.lock_quorum(lock, run_id, reentry, lease, sent, replies)
            .await
    }

    /// The majority's verdict on a quorum lock's grants.
    async fn lock_quorum(
        &self,
        lock: &LockKeys,
        run_id: &str,
        reentry: Reentry,
        lease: Duration,
        sent: Instant,
        replies: Vec<Result<LockReply, StoreError>>,
    ) -> Result<LockReply, StoreError> {
        let granted: Vec<u64> = replies
            .iter()
            .filter_map(|r| r.as_ref().ok()?.granted())
            .collect();
        if granted.len() >= self.majority() && lease_still_valid(lease, sent) {
            let fence = granted.iter().copied().max().unwrap_or(0);
            let raised = self.raise_fence(&Keys::lock_job(&lock.name), fence).await;
            if raised.is_ok() && lease_still_valid(lease, sent) {
                return Ok(LockReply::Acquired { fence });
            }
        }
        // Undo the grants where they landed, so the lock is free again.
        let _ = self.lock_release(lock, run_id, reentry).await;
        let held: Vec<(&str, i64)> = replies
            .iter()
            .filter_map(|r| match r {
                Ok(LockReply::Held { holder, ttl_ms }) => Some((holder.as_str(), *ttl_ms)),
                _ => None,
            })
            .collect();
        if held.len() >= self.majority() {
            let ttl_ms = held.iter().map(|(_, ttl)| *ttl).max().unwrap_or(0);
            return Ok(LockReply::Held {
                holder: held[0].0.to_string(),
                ttl_ms,
            });
        }
        let answered = replies.iter().filter(|r| r.is_ok()).count();
        Err(StoreError::NoQuorum {
            what: "lock",
            reachable: answered >= self.majority(),
            detail: format!(
                "lock {:?}: {} of {} Redis masters granted it and {} answered, a majority of {} needed ({})",
                lock.name,
                granted.len(),
                self.nodes.len(),
                answered,
                self.majority(),
                self.nodes
                    .iter()
                    .zip(&replies)
                    .map(|(node, reply)| match reply {
                        Ok(LockReply::Held { holder, .. }) => {
                            format!("{}: held by {holder}", node.name)
                        }
                        Ok(_) => format!("{}: granted", node.name),
                        Err(e) => format!("{}: {e}", node.name),
                    })
                    .collect::<Vec<_>>()
                    .join("; ")
            ),
        })
    }

    /// The lock script on one node.
    async fn lock_acquire_on(
        &self,
        mut conn: Conn,
        lock: &LockKeys,
        run_id: &str,
        lease: Duration,
        holder: &str,
        host: &str,
    ) -> Result<LockReply, StoreError> {
        let reply: Value = self
            .scripts
            .lock_acquire
            .key(&lock.state)
            .key(&lock.lease)
            .arg(run_id)
            .arg(duration_ms(lease))
            .arg(holder)
            .arg(host)
            .arg(duration_ms(LOCK_IDLE_TTL))
            .invoke_async(&mut conn)
            .await?;
        parse_lock(reply)
    }

    /// Releases one hold of lock `name` if `run_id` holds it (with
    /// `quorum`: on every master, counting with a majority); the last hold
    /// frees it and wakes the waiters. False if it was no longer ours.
    pub async fn lock_release(
        &self,
        lock: &LockKeys,
        run_id: &str,
        reentry: Reentry,
    ) -> Result<bool, StoreError> {
        let (lease, state, channel) = (&lock.lease, &lock.state, &lock.channel);
        let answers = self
            .on_all(|mut conn| async move {
                let released: i64 = self
                    .scripts
                    .lock_release
                    .key(lease)
                    .key(state)
                    .arg(run_id)
                    .arg(channel)
                    .arg(reentry.as_arg())
                    .invoke_async(&mut conn)
                    .await?;
                // 1: freed; 2: one hold of a re-entered lock released.
                Ok(released >= 1)
            })
            .await;
        let answers = self.gather("lock release", answers)?;
        Ok(answers.iter().filter(|released| **released).count() >= self.majority())
    }

    /// A pub/sub connection subscribed to lock `name`'s release channel
    /// (with `quorum`: on the first master that answers; a release is
    /// published on every master).
    pub async fn lock_waiter(&self, name: &str) -> Result<redis::aio::PubSub, StoreError> {
        let mut last = None;
        for node in self.nodes.iter() {
            match node.link.pubsub().await {
                Ok(mut pubsub) => {
                    pubsub.subscribe(self.keys.lock_channel(name)).await?;
                    return Ok(pubsub);
                }
                Err(e) => last = Some(e),
            }
        }
        Err(last.map_or_else(unanswered, StoreError::from))
    }

    /// Renews every lock in `renewals` in one pipeline (with `quorum`: on
    /// every master, counting with a majority); `true` where the lease was
    /// still ours and now runs a whole lease again.
    pub async fn lock_renew(&self, renewals: &[LockRenewal]) -> Result<Vec<bool>, StoreError> {
        if renewals.is_empty() {
            return Ok(Vec::new());
        }
        let idle_ms = duration_ms(LOCK_IDLE_TTL);
        let build = || {
            let mut pipe = redis::pipe();
            for renewal in renewals {
                pipe.cmd("EVALSHA")
                    .arg(self.scripts.lock_renew.get_hash())
                    .arg(2)
                    .arg(&renewal.keys.lease)
                    .arg(&renewal.keys.state)
                    .arg(&renewal.run_id)
                    .arg(duration_ms(renewal.lease))
                    .arg(idle_ms);
            }
            pipe
        };
        self.renew_all("lock renew", &self.scripts.lock_renew, renewals.len(), build)
            .await
    }

    /// Who holds lock `name` now; None when it is free. A holder's record
    /// that does not parse, or is not the lease holder's, is an error that
    /// names it.
    pub async fn lock_holder(&self, name: &str) -> Result<Option<LockHolder>, StoreError> {
        let job = Keys::lock_job(name);
        // One round trip: the lease's run id, what is left of it, and the
        // holder's record in the state.
        let mut pipe = redis::pipe();
        pipe.cmd("GET")
            .arg(self.keys.lease(&job))
            .cmd("PTTL")
            .arg(self.keys.lease(&job))
            .cmd("HMGET")
            .arg(self.keys.state(&job))
            .arg(&[
                "run_id", "holder", "host", "fence", "since_s", "since_us", "holds",
            ]);
        let pipe = &pipe;
        let (run_id, ttl_ms, record): (Option<String>, i64, HolderRecord) = self
            .read(|mut conn| async move { pipe.query_async(&mut conn).await })
            .await?;
        parse_lock_holder(name, run_id, ttl_ms, record)
    }
}

/// How many keys one SCAN step asks Redis to look at.
const SCAN_STEP: u32 = 1000;

impl Store {
    /// The names of the locks that exist now (held, or held recently
    /// enough that their lease key has not lapsed), sorted: found by SCAN
    /// on every node (every master of a Cluster, every quorum master).
    pub async fn lock_names(&self) -> Result<Vec<String>, StoreError> {
        let pattern = self.keys.lock_lease_pattern();
        let found = self
            .on_all(|conn| {
                let pattern = pattern.clone();
                async move { scan_node(conn, &pattern).await }
            })
            .await;
        let mut names = std::collections::BTreeSet::new();
        let mut last_error = None;
        let mut answered = 0;
        for result in found {
            match result {
                Ok(keys) => {
                    answered += 1;
                    names.extend(
                        keys.iter()
                            .filter_map(|key| self.keys.lock_name_of(key))
                            .map(str::to_string),
                    );
                }
                Err(e) => last_error = Some(e),
            }
        }
        match (answered, last_error) {
            (0, Some(e)) => Err(e),
            _ => Ok(names.into_iter().collect()),
        }
    }
}

/// Every key matching `pattern` on the node behind `conn`; on a Cluster,
/// on each of its masters in turn.
async fn scan_node(conn: Conn, pattern: &str) -> Result<Vec<String>, StoreError> {
    match conn {
        Conn::Cluster(mut cluster) => {
            let nodes: String = redis::cmd("CLUSTER")
                .arg("NODES")
                .query_async(&mut cluster)
                .await?;
            let mut keys = Vec::new();
            for (host, port) in cluster_masters(&nodes) {
                let routing = RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress {
                    host: host.clone(),
                    port,
                });
                let mut cursor = 0u64;
                loop {
                    let mut cmd = redis::cmd("SCAN");
                    cmd.arg(cursor)
                        .arg("MATCH")
                        .arg(pattern)
                        .arg("COUNT")
                        .arg(SCAN_STEP);
                    let reply = cluster.route_command(cmd, routing.clone()).await?;
                    let (next, batch): (u64, Vec<String>) = redis::from_redis_value(reply)
                        .map_err(|e| StoreError::Protocol {
                            what: "SCAN",
                            reply: e.to_string(),
                        })?;
                    keys.extend(batch);
                    if next == 0 {
                        break;
                    }
                    cursor = next;
                }
            }
            Ok(keys)
        }
        mut conn => {
            let mut keys = Vec::new();
            let mut cursor = 0u64;
            loop {
                let (next, batch): (u64, Vec<String>) = redis::cmd("SCAN")
                    .arg(cursor)
                    .arg("MATCH")
                    .arg(pattern)
                    .arg("COUNT")
                    .arg(SCAN_STEP)
                    .query_async(&mut conn)
                    .await?;
                keys.extend(batch);
                if next == 0 {
                    return Ok(keys);
                }
                cursor = next;
            }
        }
    }
}

/// The masters' addresses in a `CLUSTER NODES` reply (`id host:port@bus
/// flags …`; a line that does not read so is skipped).
pub(super) fn cluster_masters(nodes: &str) -> Vec<(String, u16)> {
    nodes
        .lines()
        .filter_map(|line| {
            let mut parts = line.split_whitespace();
            let (_id, address, flags) = (parts.next()?, parts.next()?, parts.next()?);
            if !flags.split(',').any(|f| f == "master") || flags.contains("fail") {
                return None;
            }
            let address = address.split('@').next()?;
            let (host, port) = address.rsplit_once(':')?;
            Some((host.to_string(), port.parse().ok()?))
        })
        .collect()
}
