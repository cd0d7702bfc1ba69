//! The cluster locks of `cronlease lock NAME` and the library: acquire,
//! renew and release scripts, the release channel waiters sleep on, and
//! who holds a lock. A lock is two keys of the pseudo-job `lock:NAME`: its
//! `lease` (the holder's record, see [`record`], with the lease as its
//! TTL) and its `state` (a hash with the fence, see `lock_acquire.lua`).
//! Its scripts are sent as one `EVALSHA` command each, built here from
//! arguments encoded once (the holder's part of the record per holder, the
//! token and key names per acquisition).

use super::{
    Reply, Store, StoreError, as_int, duration_ms, lease_still_valid, protocol, reply, unanswered,
};
use crate::link::Conn;
use redis::Script;

mod record;

use std::time::{Duration, Instant};

use redis::{Cmd, RedisWrite, Value};

/// How long the state of a lock (its fence) lives after it is made; a
/// lock name used once does not stay in Redis for ever. Its lease lives
/// as long as the lease.
pub const LOCK_IDLE_TTL: Duration = Duration::from_secs(30 * 24 * 3600);

/// Who holds a lock, as [`LockBuilder::info`](crate::LockBuilder::info)
/// read it from Redis (with `quorum`: from the first master that answers).
///
/// Built by the crate only; more fields may come.
///
/// ```no_run
/// # async fn f(cluster: cronlease::Cluster) -> Result<(), cronlease::LockError> {
/// if let Some(holder) = cluster.lock("report").info().await? {
///     println!(
///         "{} on {} holds it (fence {}, {} hold(s)) since {}, {:?} left",
///         holder.holder, holder.host, holder.fence, holder.holds, holder.since, holder.time_left
///     );
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockHolder {
    /// Who holds it ([`crate::LockBuilder::holder`]; by default the
    /// instance's host name and pid).
    pub holder: String,
    /// The host it holds from.
    pub host: String,
    /// The fence of the acquisition that holds it.
    pub fence: u64,
    /// When it was acquired (to the millisecond): the Redis time as the
    /// holder estimated it (its clock, plus the offset to Redis's clock it
    /// measured when it connected).
    pub since: jiff::Timestamp,
    /// What is left of the lease (to the millisecond; renewals push it
    /// back up).
    pub time_left: Duration,
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
        /// Who holds it: the holder in its record, or the lease's value
        /// as it is when that is no record (an older cronlease's run id).
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

/// Who takes locks (holder and host, as [`LockHolder`] shows them), with
/// the two encoded for the record once, not per acquisition.
#[derive(Debug)]
pub struct LockHolderTag {
    holder: String,
    host: String,
    /// Holder and host as the record holds them.
    encoded: String,
}

impl LockHolderTag {
    pub fn new(holder: &str, host: &str) -> LockHolderTag {
        LockHolderTag {
            holder: holder.to_string(),
            host: host.to_string(),
            encoded: record::holder_part(holder, host),
        }
    }

    /// Who holds.
    pub fn holder(&self) -> &str {
        &self.holder
    }

    /// The host it holds from.
    pub fn host(&self) -> &str {
        &self.host
    }
}

/// One acquisition of a lock as Redis knows it: the lock's name, its key
/// names and the holder's token (its run id as its record begins with
/// it), in one buffer. Made once per acquisition and shared by its
/// renewals and release.
#[derive(Debug)]
pub struct LockTicket {
    /// Name, state key, lease key and token, one after the other.
    text: String,
    state_at: usize,
    lease_at: usize,
    token_at: usize,
}

impl LockTicket {
    /// The lock's name.
    pub fn name(&self) -> &str {
        &self.text[..self.state_at]
    }

    fn state(&self) -> &str {
        &self.text[self.state_at..self.lease_at]
    }

    fn lease(&self) -> &str {
        &self.text[self.lease_at..self.token_at]
    }

    fn token(&self) -> &str {
        &self.text[self.token_at..]
    }

    /// The run id the lock is held by.
    pub fn run_id(&self) -> &str {
        record::run_id_of(self.token())
    }
}

/// What an acquisition asks for, besides the lock.
#[derive(Debug, Clone, Copy)]
pub struct LockRequest<'a> {
    pub reentry: Reentry,
    pub lease: Duration,
    pub holder: &'a LockHolderTag,
    /// The holder's estimate of the Redis time now, ms: the record's
    /// `since`, and what tells an old state.
    pub since_ms: i64,
}

/// A new holder's record (see [`record`]), written straight into the
/// command.
struct NewRecord<'a> {
    token: &'a str,
    holder: &'a LockHolderTag,
    since_ms: i64,
}

impl std::fmt::Display for NewRecord<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.token)?;
        f.write_str(&self.holder.encoded)?;
        write!(f, "|{}|1", self.since_ms)
    }
}

/// How old a lock's state may grow before a grant pushes its expiry back
/// and lifts its fence to the Redis time (`lock_acquire.lua`): a day short
/// of [`LOCK_IDLE_TTL`], so that no hold outlives its state.
const LOCK_STATE_REFRESH_AGE: Duration = Duration::from_secs(29 * 24 * 3600);

/// The fence a grant of `fence` at Redis time `now_ms` is lifted to, if
/// its state is older than [`LOCK_STATE_REFRESH_AGE`] (states start their
/// fence from the Redis time in µs, and a grant adds one): the Redis time
/// in µs, above every fence so far.
fn lifted_fence(fence: u64, now_ms: i64) -> Option<u64> {
    let age_ms = i64::try_from(LOCK_STATE_REFRESH_AGE.as_millis()).unwrap_or(i64::MAX);
    let old = u64::try_from(now_ms.saturating_sub(age_ms).saturating_mul(1000)).unwrap_or(0);
    let now_us = u64::try_from(now_ms.saturating_mul(1000)).unwrap_or(0);
    (fence < old).then_some(now_us.max(fence))
}

/// One held lock's renewal, as the lock keeper sends it.
#[derive(Debug, Clone, Copy)]
pub struct LockRenewal<'a> {
    pub ticket: &'a LockTicket,
    pub lease: Duration,
    /// The holder's fence, for a state that expired all the same.
    pub fence: u64,
}

/// The lock script's reply: the fence alone when acquired, else an array
/// that says which.
pub(super) fn parse_lock(value: Value) -> Result<LockReply, StoreError> {
    if let Value::Int(_) = value {
        return Ok(LockReply::Acquired {
            fence: reply::fence_of(&value).ok_or_else(|| protocol("lock", &value))?,
        });
    }
    let r = Reply::new(value, "lock")?;
    match r.string(0)?.as_str() {
        "reentered" => Ok(LockReply::Reentered {
            fence: r.fence(1)?,
            holds: u32::try_from(r.int(2)?).map_err(|_| r.bad())?,
        }),
        "held" => {
            let value = r.string_or_empty(1);
            Ok(LockReply::Held {
                holder: record::parse(&value)
                    .map_or_else(|| value.clone(), |r| r.holder.to_string()),
                ttl_ms: r.int_or(2, 0),
            })
        }
        _ => Err(r.bad()),
    }
}

/// The lock release script's reply: whether the lock was ours (1: freed,
/// 2: one hold of a re-entered lock released; 0: not ours).
fn parse_release(reply: &Value) -> Result<bool, StoreError> {
    match as_int(reply) {
        Some(0) => Ok(false),
        Some(1 | 2) => Ok(true),
        _ => Err(protocol("lock release", reply)),
    }
}

/// Who holds lock `name`, from the lease's value (the holder's record),
/// its time left and the lock's fence; None when the lease is gone, an
/// error naming the lock when the value is no record or the fence is
/// missing or not one.
pub(super) fn parse_lock_holder(
    name: &str,
    value: Option<String>,
    ttl_ms: i64,
    fence: &Value,
) -> Result<Option<LockHolder>, StoreError> {
    let Some(value) = value else {
        return Ok(None);
    };
    let bad = |detail: String| StoreError::Protocol {
        what: "lock holder",
        reply: format!("lock {name:?}: {detail}"),
    };
    let Some(record) = record::parse(&value) else {
        return Err(bad(format!(
            "its lease holds {value:?}, not a holder's record (taken by an older cronlease, which kept only the run id there?)"
        )));
    };
    let Some(fence) = reply::fence_of(fence) else {
        return Err(bad(format!("its fence is {fence:?}")));
    };
    let Ok(since) = jiff::Timestamp::from_millisecond(record.since_ms) else {
        return Err(bad(format!(
            "its record says it was taken at {} ms, not a time",
            record.since_ms
        )));
    };
    Ok(Some(LockHolder {
        holder: record.holder.to_string(),
        host: record.host.to_string(),
        fence,
        since,
        time_left: Duration::from_millis(u64::try_from(ttl_ms).unwrap_or(0)),
        holds: record.holds,
    }))
}

/// Runs `cmd`, an `EVALSHA` of `script`; if Redis does not know the
/// script yet, loads it and runs `cmd` again (a NOSCRIPT reply means
/// nothing ran).
async fn evalsha(conn: &mut Conn, script: &Script, cmd: &Cmd) -> Result<Value, StoreError> {
    match cmd.query_async::<Value>(conn).await {
        Err(e) if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) => {
            script.prepare_invoke().load_async(conn).await?;
            Ok(cmd.query_async(conn).await?)
        }
        other => Ok(other?),
    }
}

impl Store {
    /// The names one acquisition of lock `name` by `run_id` uses.
    pub fn lock_ticket(&self, name: &str, run_id: &str) -> LockTicket {
        let mut text = String::with_capacity(3 * name.len() + run_id.len() + 64);
        text.push_str(name);
        let state_at = text.len();
        self.keys.push_lock_key(&mut text, name, "state");
        let lease_at = text.len();
        self.keys.push_lock_key(&mut text, name, "lease");
        let token_at = text.len();
        record::push_encoded(&mut text, run_id);
        LockTicket {
            text,
            state_at,
            lease_at,
            token_at,
        }
    }

    /// Tries to take lock `name`. With `quorum`, the lock holds only if a
    /// majority of the masters granted it while its lease still had time
    /// left (RedLock's rule, the claim's rule): the fence is then raised
    /// to the highest on every master, and otherwise the grants are undone
    /// where they landed.
    pub async fn lock_acquire(
        &self,
        lock: &LockTicket,
        request: LockRequest<'_>,
    ) -> Result<LockReply, StoreError> {
        let LockRequest {
            lease,
            holder,
            since_ms,
            ..
        } = request;
        let mut cmd = Cmd::with_capacity(8, 128 + lock.text.len() + holder.encoded.len());
        cmd.arg("EVALSHA")
            .arg(self.scripts.lock_acquire.get_hash())
            .arg(2)
            .arg(lock.state())
            .arg(lock.lease())
            .write_arg_fmt(NewRecord {
                token: lock.token(),
                holder,
                since_ms,
            });
        cmd.arg(duration_ms(lease));
        let script = &self.scripts.lock_acquire;
        if let [node] = &*self.nodes {
            let reply = parse_lock(evalsha(&mut node.conn().await?, script, &cmd).await?)?;
            if let LockReply::Acquired { fence } = reply
                && let Some(lifted) = lifted_fence(fence, since_ms)
            {
                // Its state is 29 days old: once a month or so.
                self.lock_raise_fence(lock, lifted).await?;
                return Ok(LockReply::Acquired { fence: lifted });
            }
            return Ok(reply);
        }
        let sent = Instant::now();
        let cmd = &cmd;
        let replies = self
            .on_all_until_majority(
                |mut conn| async move { parse_lock(evalsha(&mut conn, script, cmd).await?) },
                |reply| reply.granted().is_some(),
            )
            .await;
        self.lock_quorum(lock, request, sent, replies).await
    }

    /// The majority's verdict on a quorum lock's grants.
    async fn lock_quorum(
        &self,
        lock: &LockTicket,
        request: LockRequest<'_>,
        sent: Instant,
        replies: Vec<Result<LockReply, StoreError>>,
    ) -> Result<LockReply, StoreError> {
        let LockRequest {
            reentry,
            lease,
            since_ms,
            ..
        } = request;
        let granted: Vec<u64> = replies
            .iter()
            .filter_map(|r| r.as_ref().ok()?.granted())
            .collect();
        if granted.len() >= self.majority() && lease_still_valid(lease, sent) {
            let fence = granted.iter().copied().max().unwrap_or(0);
            let fence = lifted_fence(fence, since_ms).unwrap_or(fence);
            let raised = self.lock_raise_fence(lock, fence).await;
            if raised.is_ok() && lease_still_valid(lease, sent) {
                return Ok(LockReply::Acquired { fence });
            }
        }
        // Undo the grants where they landed, so the lock is free again.
        let _ = self.lock_release(lock, reentry).await;
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
                lock.name(),
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

    /// Quorum mode: raises lock `name`'s fence to `fence` on a majority of
    /// the masters (`lock_fence.lua`).
    async fn lock_raise_fence(&self, lock: &LockTicket, fence: u64) -> Result<(), StoreError> {
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(self.scripts.lock_fence.get_hash())
            .arg(1)
            .arg(lock.state())
            .arg(fence)
            .arg(duration_ms(LOCK_IDLE_TTL));
        let (cmd, script) = (&cmd, &self.scripts.lock_fence);
        let raised = self
            .on_all_until_majority(
                |mut conn| async move { evalsha(&mut conn, script, cmd).await },
                |_| true,
            )
            .await;
        self.gather("lock (raising the fence)", raised).map(|_| ())
    }

    /// Releases one hold of lock `name` if its ticket holds it (with
    /// `quorum`: on every master, counting with a majority); the last hold
    /// frees it and wakes the waiters. False if it was no longer ours.
    pub async fn lock_release(
        &self,
        lock: &LockTicket,
        reentry: Reentry,
    ) -> Result<bool, StoreError> {
        let mut cmd = Cmd::with_capacity(6, 96 + lock.text.len());
        cmd.arg("EVALSHA")
            .arg(self.scripts.lock_release.get_hash())
            .arg(1)
            .arg(lock.lease())
            .arg(lock.token())
            .arg(reentry.as_arg());
        let script = &self.scripts.lock_release;
        if let [node] = &*self.nodes {
            return parse_release(&evalsha(&mut node.conn().await?, script, &cmd).await?);
        }
        let cmd = &cmd;
        let answers = self
            .on_all(
                |mut conn| async move { parse_release(&evalsha(&mut conn, script, cmd).await?) },
            )
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
    pub async fn lock_renew(&self, renewals: &[LockRenewal<'_>]) -> Result<Vec<bool>, StoreError> {
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
                    .arg(renewal.ticket.lease())
                    .arg(renewal.ticket.state())
                    .arg(renewal.ticket.token())
                    .arg(duration_ms(renewal.lease))
                    .arg(idle_ms)
                    .arg(renewal.fence);
            }
            pipe
        };
        let renewed = self
            .renew_all(
                "lock renew",
                &self.scripts.lock_renew,
                renewals.len(),
                build,
            )
            .await?;
        Ok(renewed
            .into_iter()
            .map(|r| r != super::Renewed::Lost)
            .collect())
    }

    /// Who holds lock `name` now; None when it is free. A lease whose
    /// value is not a holder's record is an error that names the lock.
    pub async fn lock_holder(&self, name: &str) -> Result<Option<LockHolder>, StoreError> {
        // One round trip, one moment (MULTI): the holder's record, what is
        // left of it, and the lock's fence, which is the holder's.
        let lease = self.keys.lock_key(name, "lease");
        let mut pipe = redis::pipe();
        pipe.atomic()
            .cmd("GET")
            .arg(&lease)
            .cmd("PTTL")
            .arg(&lease)
            .cmd("HGET")
            .arg(self.keys.lock_key(name, "state"))
            .arg("fence");
        let pipe = &pipe;
        let (value, ttl_ms, fence): (Option<String>, i64, Value) = self
            .read(|mut conn| async move { pipe.query_async(&mut conn).await })
            .await?;
        parse_lock_holder(name, value, ttl_ms, &fence)
    }
}

/// How long a lock stays in the registry after a process last registered
/// it: as long as its state key lives (30 days after it was made).
const REGISTRY_KEEP_MS: i64 = 30 * 24 * 3600 * 1000;

/// The most names the registry lists at once.
const REGISTRY_LISTED: isize = 10_000;

impl Store {
    /// Adds lock `name` to the registry of locks (`Keys::lock_registry`)
    /// at Redis time `now_ms`, and drops names not registered for 30 days;
    /// on every node. The lock's holder calls it after an acquisition, at
    /// most once a day per name and process: an index, not the lock.
    pub async fn register_lock(&self, name: &str, now_ms: i64) -> Result<(), StoreError> {
        let registry = self.keys.lock_registry();
        let answers = self
            .on_all(|mut conn| {
                let registry = registry.clone();
                async move {
                    let mut pipe = redis::pipe();
                    pipe.cmd("ZADD")
                        .arg(&registry)
                        .arg(now_ms)
                        .arg(name)
                        .ignore()
                        .cmd("ZREMRANGEBYSCORE")
                        .arg(&registry)
                        .arg("-inf")
                        .arg(now_ms - REGISTRY_KEEP_MS)
                        .ignore();
                    pipe.query_async::<()>(&mut conn).await?;
                    Ok(())
                }
            })
            .await;
        self.gather("register lock", answers).map(drop)
    }

    /// The names of the locks that exist now (held, or held recently
    /// enough that their lease key has not lapsed), sorted: the registry's
    /// names (every node's) whose lease key exists. No keyspace scan.
    pub async fn lock_names(&self) -> Result<Vec<String>, StoreError> {
        let registry = self.keys.lock_registry();
        let found = self
            .on_all(|mut conn| {
                let registry = registry.clone();
                async move {
                    let names: Vec<String> = redis::cmd("ZRANGE")
                        .arg(&registry)
                        .arg(0)
                        .arg(REGISTRY_LISTED - 1)
                        .query_async(&mut conn)
                        .await?;
                    let names: Vec<String> = names
                        .into_iter()
                        .filter(|name| crate::config::is_name(name, 128))
                        .collect();
                    if names.is_empty() {
                        return Ok(Vec::new());
                    }
                    // One EXISTS each, sent together: in a Cluster the
                    // lease keys live in as many slots as there are locks.
                    let held = futures_util::future::join_all(names.iter().map(|name| {
                        let mut conn = conn.clone();
                        let key = self.keys.lock_key(name, "lease");
                        async move {
                            redis::cmd("EXISTS")
                                .arg(key)
                                .query_async::<i64>(&mut conn)
                                .await
                        }
                    }))
                    .await
                    .into_iter()
                    .collect::<Result<Vec<i64>, _>>()?;
                    Ok(names
                        .into_iter()
                        .zip(held)
                        .filter(|(_, exists)| *exists == 1)
                        .map(|(name, _)| name)
                        .collect::<Vec<_>>())
                }
            })
            .await;
        let mut names = std::collections::BTreeSet::new();
        let mut last_error = None;
        let mut answered = 0;
        for result in found {
            match result {
                Ok(found) => {
                    answered += 1;
                    names.extend(found);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fence_more_than_29_days_old_is_lifted_to_the_redis_time() {
        let now_ms = 1_800_000_000_000;
        let day_us = 24 * 3_600 * 1_000_000;
        let made_us = |days: u64| (now_ms as u64) * 1000 - days * day_us;
        // Fresh, or 28 days old: as it is.
        assert_eq!(lifted_fence(made_us(0) + 7, now_ms), None);
        assert_eq!(lifted_fence(made_us(28), now_ms), None);
        // 30 days old, or an older cronlease's small counter: now, in µs.
        assert_eq!(lifted_fence(made_us(30), now_ms), Some(made_us(0)));
        assert_eq!(lifted_fence(42, now_ms), Some(made_us(0)));
        // A clock that reads before 1970 lifts nothing.
        assert_eq!(lifted_fence(42, -5), None);
    }

    #[test]
    fn the_acquisition_script_keeps_a_new_state_for_the_idle_ttl() {
        let pexpire = format!("'PEXPIRE', state, '{}'", duration_ms(LOCK_IDLE_TTL));
        assert!(include_str!("../lua/lock_acquire.lua").contains(&pexpire));
    }
}
