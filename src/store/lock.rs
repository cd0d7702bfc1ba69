//! The cluster locks of `cronlease lock NAME`: acquire and release scripts
//! (a lock is the pseudo-job `lock:NAME`), and the release channel waiters
//! sleep on.

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
        lease_key: String,
    },
    /// Its holder asked again with the same run id (an owner): one more
    /// hold, the same fence.
    Reentered {
        fence: u64,
        lease_key: String,
        holds: u32,
    },
    Held {
        holder: String,
        ttl_ms: i64,
    },
}

impl LockReply {
    /// The fence and lease key of a grant (acquired or re-entered).
    pub fn granted(&self) -> Option<(u64, &str)> {
        match self {
            LockReply::Acquired { fence, lease_key }
            | LockReply::Reentered {
                fence, lease_key, ..
            } => Some((*fence, lease_key)),
            LockReply::Held { .. } => None,
        }
    }
}

/// The lock script's reply.
pub(super) fn parse_lock(reply: Value) -> Result<LockReply, StoreError> {
    let r = Reply::new(reply, "lock")?;
    match r.string(0)?.as_str() {
        "acquired" => Ok(LockReply::Acquired {
            fence: r.fence(1)?,
            lease_key: r.string(2)?,
        }),
        "reentered" => Ok(LockReply::Reentered {
            fence: r.fence(1)?,
            lease_key: r.string(2)?,
            holds: u32::try_from(r.int(3)?).map_err(|_| r.bad())?,
        }),
        "held" => Ok(LockReply::Held {
            holder: r.string_or_empty(1),
            ttl_ms: r.int_or(2, 0),
        }),
        _ => Err(r.bad()),
    }
}

/// Who holds lock `name`, from the lease's run id, its time left, the hold
/// count and the lock's `running` hash as `lock_holder` reads them; None
/// when the lease is gone, an error naming the lock when the entry does
/// not parse.
pub(super) fn parse_lock_holder(
    name: &str,
    run_id: Option<String>,
    ttl_ms: i64,
    holds: Option<u32>,
    running: Vec<(String, String)>,
) -> Result<Option<LockHolder>, StoreError> {
    let Some(run_id) = run_id else {
        return Ok(None);
    };
    let entry = running
        .into_iter()
        .find_map(|(id, entry)| (id == run_id).then_some(entry));
    let bad = |detail: &str| StoreError::Protocol {
        what: "lock holder",
        reply: format!("lock {name:?}, run {run_id}: {detail}"),
    };
    let entry = entry.ok_or_else(|| bad("the lease has no entry in `running`"))?;
    let value: serde_json::Value =
        serde_json::from_str(&entry).map_err(|e| bad(&format!("{e}: {entry}")))?;
    let text = |field: &str| value[field].as_str().unwrap_or_default().to_string();
    Ok(Some(LockHolder {
        holder: text("replica"),
        host: text("host"),
        fence: value["fence"].as_u64().ok_or_else(|| bad("no fence"))?,
        since_ms: value["started"].as_i64().unwrap_or(0),
        ttl_ms: ttl_ms.max(0),
        holds: holds.unwrap_or(1),
    }))
}

impl Store {
    /// Tries to take lock `name`. With `quorum`, the lock holds only if a
    /// majority of the masters granted it while its lease still had time
    /// left (RedLock's rule, the claim's rule): the fence is then raised
    /// to the highest on every master, and otherwise the grants are undone
    /// where they landed.
    pub async fn lock_acquire(
        &self,
        name: &str,
        run_id: &str,
        lease: Duration,
        holder: &str,
        host: &str,
    ) -> Result<LockReply, StoreError> {
        let sent = Instant::now();
        let replies = self
            .on_all_until_majority(
                |conn| async move {
                    self.lock_acquire_on(conn, name, run_id, lease, holder, host)
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
        self.lock_quorum(name, run_id, lease, sent, replies).await
    }

    /// The majority's verdict on a quorum lock's grants.
    async fn lock_quorum(
        &self,
        name: &str,
        run_id: &str,
        lease: Duration,
        sent: Instant,
        replies: Vec<Result<LockReply, StoreError>>,
    ) -> Result<LockReply, StoreError> {
        let granted: Vec<(u64, &str)> = replies
            .iter()
            .filter_map(|r| r.as_ref().ok()?.granted())
            .collect();
        if granted.len() >= self.majority() && lease_still_valid(lease, sent) {
            let fence = granted.iter().map(|(f, _)| *f).max().unwrap_or(0);
            let lease_key = granted[0].1.to_string();
            let raised = self.raise_fence(&Keys::lock_job(name), fence).await;
            if raised.is_ok() && lease_still_valid(lease, sent) {
                return Ok(LockReply::Acquired { fence, lease_key });
            }
        }
        // Undo the grants where they landed, so the lock is free again.
        let _ = self.lock_release(name, run_id).await;
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
                "lock {name:?}: {} of {} Redis masters granted it and {} answered, a majority of {} needed ({})",
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
        name: &str,
        run_id: &str,
        lease: Duration,
        holder: &str,
        host: &str,
    ) -> Result<LockReply, StoreError> {
        let job = Keys::lock_job(name);
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
            .arg(duration_ms(LOCK_IDLE_TTL + lease))
            .invoke_async(&mut conn)
            .await?;
        parse_lock(reply)
    }

    /// Releases one hold of lock `name` if `run_id` holds it (with
    /// `quorum`: on every master, counting with a majority); the last hold
    /// frees it and wakes the waiters. False if it was no longer ours.
    pub async fn lock_release(&self, name: &str, run_id: &str) -> Result<bool, StoreError> {
        let job = Keys::lock_job(name);
        let (running, lease) = (self.keys.running(&job), self.keys.lease(&job));
        let (state, channel) = (self.keys.state(&job), self.keys.lock_channel(name));
        let (running, lease, state, channel) = (&running, &lease, &state, &channel);
        let answers = self
            .on_all(|mut conn| async move {
                let released: i64 = self
                    .scripts
                    .lock_release
                    .key(running)
                    .key(lease)
                    .key(state)
                    .arg(run_id)
                    .arg(channel)
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

    /// Who holds lock `name` now; None when it is free. An entry that does
    /// not parse is an error that names it.
    pub async fn lock_holder(&self, name: &str) -> Result<Option<LockHolder>, StoreError> {
        let job = Keys::lock_job(name);
        // One round trip: the lease's run id, what is left of it, the hold
        // count and the runs in flight (a lock has one at most).
        let mut pipe = redis::pipe();
        pipe.cmd("GET")
            .arg(self.keys.lease(&job))
            .cmd("PTTL")
            .arg(self.keys.lease(&job))
            .cmd("HGET")
            .arg(self.keys.state(&job))
            .arg("holds")
            .cmd("HGETALL")
            .arg(self.keys.running(&job));
        let pipe = &pipe;
        type Read = (Option<String>, i64, Option<u32>, Vec<(String, String)>);
        let (run_id, ttl_ms, holds, running): Read = self
            .read(|mut conn| async move { pipe.query_async(&mut conn).await })
            .await?;
        parse_lock_holder(name, run_id, ttl_ms, holds, running)
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
