//! The Redis side: key names, the Lua scripts, and typed requests and replies.
//!
//! Every change to a job's state is one atomic script (claim, renew, finish,
//! sweep): there is never a read-then-write across round trips, so a future
//! dropped half-way can never leave a half-done change. All keys of one job
//! share the hash tag `{job}`, so each script touches a single Redis Cluster
//! slot. This module knows nothing of processes or schedules; it turns
//! requests into script calls and replies into enums.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redis::{Script, Value};

use crate::config::{Overlap, RedisConfig};
use crate::link::{Conn, Link};

mod audit;
mod backfill;
mod batch;
mod capacity;
mod chain;
mod claim;
mod drain;
mod error;
mod events;
mod heartbeat;
mod job_state;
mod keys;
mod kill;
mod live;
mod lock;
mod operator;
mod pause;
mod reply;
mod run;
#[cfg(feature = "dashboard")]
mod sign_ins;
mod triggers;

pub use chain::{FollowReply, FollowRequest, Followers, InboxEntry};
pub use error::StoreError;
use reply::{Reply, as_int, as_string, protocol};

pub use audit::Action;
pub use backfill::{PlanMode, PlanRequest, SkipReason, TakeReply};
pub use capacity::{CapacityCause, CapacitySkip, CapacitySkipReply};
pub use claim::{ClaimReply, ClaimRequest, GroupClaim, StateCheck, StateField, WhenBusy};
pub use drain::{DRAIN_NOTICE, DrainChange, DrainMark};
#[cfg(feature = "internals")]
pub use events::NO_NOTICES;
pub use events::{
    ChannelHealth, DeliveryFailure, EventRecord, GaveUp, MissedReason, NoticeRules, Notices,
    PendingEvent,
};
pub use pause::{ClusterHold, ClusterPause, PAUSE_ALL_NOTICE, PauseAnswer, PauseRequest};

/// How far ahead of Redis time a claim may set a job's high-water mark
/// (a claim is made at most its lead, under a second, ahead of its tick):
/// a `last_tick` or an announced tick further ahead was forged. The claim
/// script holds the same number (`MAX_AHEAD_MS` in `prelude.lua`).
pub const MAX_CLAIM_AHEAD_MS: i64 = 2_000;

/// Whether `text` can be a run id: what cronlease makes is a UUID; what
/// it accepts from Redis (a trigger request) is 1 to 64 ASCII letters,
/// digits and `-`, so that it is safe as a key part, a cgroup's name and a
/// log field.
pub fn is_run_id(text: &str) -> bool {
    (1..=64).contains(&text.len()) && text.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
}

/// The highest fence a claim hands out or believes: 2^53 - 1, the largest
/// integer a Lua number (and a JSON reader) holds exactly. The claim
/// script holds the same number (`MAX_FENCE` in `prelude.lua`).
pub const MAX_FENCE: u64 = (1 << 53) - 1;
pub use heartbeat::{Epoch, REPLICA_FORGET_AFTER, ServerTime};
pub use job_state::{LastOutcome, Pause, Repair, RunningStatus};
#[cfg(feature = "internals")]
pub use run::DEDUP_MIN_ENTRIES;
pub use run::{
    DEDUP_WINDOW, FinishReply, GroupSlot, Recorded, Renewal, Renewed, Rerun, RerunOffer,
    SweepRequest, dedup_entries,
};

pub use keys::Keys;
pub use live::{LiveBatch, LiveEntry};
pub use lock::{
    LockHolder, LockHolderTag, LockRenewal, LockReply, LockRequest, LockTicket, Reentry,
};
pub use triggers::{ManualReply, ManualRequest, TriggerReader, TriggerRequest};

/// Every reader of a Redis reply, callable on a reply built by hand: for
/// the fuzz targets (`fuzz/`) and the property tests
/// (`tests/it/properties.rs`), which check that no reply, however wrong,
/// makes them panic. Not part of any API.
#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod fuzzing;

const PRELUDE: &str = include_str!("../lua/prelude.lua");

struct Scripts {
    claim: Script,
    /// The claim's and the finish's batch forms (see `batch`).
    claims: batch::Batcher,
    finishes: batch::Batcher,
    renew: Script,
    finish: Script,
    sweep: Script,
    manual: Script,
    after: Script,
    backfill_plan: Script,
    backfill_take: Script,
    lock_acquire: Script,
    lock_release: Script,
    lock_renew: Script,
    lock_fence: Script,
    forget_replica: Script,
    pause: Script,
    pause_end: Script,
    pause_all: Script,
    pause_all_end: Script,
    missed: Script,
    unplaced: Script,
    broadcast: Script,
    release: Script,
    raise_fence: Script,
    repair: Script,
    outcome_fields: Script,
    overdue: Script,
    replica_dead: Script,
    kill: Script,
    skip_capacity: Script,
}

impl Scripts {
    fn new() -> Scripts {
        let script = |body: &str| Script::new(&format!("{PRELUDE}\n{body}"));
        Scripts {
            claim: script(include_str!("../lua/claim.lua")),
            claims: batch::Batcher::new(include_str!("../lua/claim.lua")),
            finishes: batch::Batcher::new(include_str!("../lua/finish.lua")),
            renew: script(include_str!("../lua/renew.lua")),
            finish: script(include_str!("../lua/finish.lua")),
            sweep: script(include_str!("../lua/sweep.lua")),
            manual: script(include_str!("../lua/manual.lua")),
            after: script(include_str!("../lua/after.lua")),
            backfill_plan: script(include_str!("../lua/backfill_plan.lua")),
            backfill_take: script(include_str!("../lua/backfill_take.lua")),
            lock_acquire: Script::new(include_str!("../lua/lock_acquire.lua")),
            lock_release: Script::new(include_str!("../lua/lock_release.lua")),
            lock_renew: Script::new(include_str!("../lua/lock_renew.lua")),
            lock_fence: Script::new(include_str!("../lua/lock_fence.lua")),
            forget_replica: Script::new(include_str!("../lua/forget_replica.lua")),
            pause: script(include_str!("../lua/pause.lua")),
            pause_end: script(include_str!("../lua/pause_end.lua")),
            pause_all: Script::new(include_str!("../lua/pause_all.lua")),
            pause_all_end: Script::new(include_str!("../lua/pause_all_end.lua")),
            missed: script(include_str!("../lua/missed.lua")),
            unplaced: script(include_str!("../lua/unplaced.lua")),
            broadcast: script(include_str!("../lua/broadcast.lua")),
            release: Script::new(include_str!("../lua/release.lua")),
            raise_fence: Script::new(include_str!("../lua/raise_fence.lua")),
            repair: script(include_str!("../lua/repair.lua")),
            outcome_fields: Script::new(include_str!("../lua/outcome_fields.lua")),
            overdue: script(include_str!("../lua/overdue.lua")),
            replica_dead: script(include_str!("../lua/replica_dead.lua")),
            kill: script(include_str!("../lua/kill.lua")),
            skip_capacity: script(include_str!("../lua/skip_capacity.lua")),
        }
    }
}

/// Whether an earlier attempt of a claim or of an outcome's delivery (the
/// same run id) was sent. A first attempt spares Redis the look-up that
/// recognises a retry: no earlier one can have landed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Attempt {
    /// Nothing was sent for this run id before.
    First,
    /// A retry (after an error, or a reply that did not come), or a copy
    /// from the spool or memory.
    Again,
}

impl Attempt {
    fn as_arg(self) -> &'static str {
        match self {
            Attempt::First => "first",
            Attempt::Again => "again",
        }
    }
}

/// A `TIME` reply's seconds and microseconds as µs since the epoch; None
/// when that does not fit in an `i64` (no Redis says so; a proxy or a
/// fault might).
fn time_us(secs: i64, micros: i64) -> Option<i64> {
    secs.checked_mul(1_000_000)?.checked_add(micros)
}

/// Who claims, and on what terms: what every request that can hand out a
/// lease carries (a claim, a manual run, a finish or a sweep that starts a
/// rerun).
#[derive(Debug, Clone, Copy)]
pub struct Claimant<'a> {
    pub replica: &'a str,
    pub host: &'a str,
    pub lease: Duration,
    pub overlap: Overlap,
    /// Outcomes kept per job.
    pub history: u32,
    /// The highest fence this replica has seen for the job: a fence handed
    /// out now is above it.
    pub min_fence: u64,
    /// The job's notification rules: a claim tells a late start, a sweep
    /// an abandoned run.
    pub notices: &'a Notices,
    /// The job's `max_runs`: a claim that finds the job has started that
    /// many runs of its schedule answers `Ended`. None: no limit.
    pub max_runs: Option<u32>,
    /// The job's concurrency group: a manual run, a follower's run or a
    /// backfill tick takes one of its slots, or waits.
    pub group: Option<&'a crate::config::JobGroup>,
}

/// What the eviction and persistence settings of the server are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerSettings {
    /// `CONFIG GET` is not allowed (managed Redis): nothing known.
    Unknown(String),
    Known {
        maxmemory: u64,
        policy: String,
        appendonly: bool,
        save: String,
    },
}

/// A connection to Redis with the scripts and key names: cheap to clone,
/// every clone shares the connections, which reconnect by themselves.
///
/// With `[redis] quorum` it speaks to several independent masters: writes
/// go to all of them and count only with a majority; reads ask the first
/// that answers. Otherwise there is one node and each request is sent once.
#[derive(Clone)]
pub struct Store {
    nodes: Arc<[Node]>,
    command_timeout: Duration,
    keys: Arc<Keys>,
    scripts: Arc<Scripts>,
    /// `(k, timeout)`: each claim is followed by `WAIT k timeout`.
    wait_replicas: Option<(u32, Duration)>,
}

/// Quorum mode: once a majority granted a claim, how long the other
/// masters' answers are still waited for. A claim every master holds
/// survives the loss of any one during the run; a hung master costs each
/// claim this much, not `command_timeout`.
const STRAGGLER_GRACE: Duration = Duration::from_millis(100);

/// Quorum mode: whether a lease granted by a round sent at `sent` still
/// has time left, less a clock drift allowance (1 % of the lease plus
/// 2 ms, RedLock's): the masters' clocks may run a little fast.
fn lease_still_valid(lease: Duration, sent: Instant) -> bool {
    lease > sent.elapsed() + lease / 100 + Duration::from_millis(2)
}

/// How long a quorum node that could not be connected to is left alone
/// before the next attempt.
const RECONNECT_PAUSE: Duration = Duration::from_secs(1);

/// One Redis deployment: the only one, or one master of a quorum.
struct Node {
    /// For logs and errors, credentials redacted.
    name: String,
    /// For connections of their own (blocking reads, pub/sub).
    link: Link,
    /// The shared connection, once made; it reconnects by itself.
    conn: tokio::sync::OnceCell<Conn>,
    /// When the last attempt to make `conn` failed.
    failed_at: Mutex<Option<Instant>>,
    connect_timeout: Duration,
}

impl Node {
    /// The shared connection, made on first use (a quorum master that is
    /// down at start is connected to when it is back).
    async fn conn(&self) -> Result<Conn, StoreError> {
        if let Some(conn) = self.conn.get() {
            return Ok(conn.clone());
        }
        // Boxed: connecting is rare and its future is ~3.9 KB, which every
        // claim's and finish's future would otherwise carry while it waits
        // (thousands at once under load).
        Box::pin(self.connect()).await
    }

    /// Makes the shared connection, unless the last attempt failed less
    /// than [`RECONNECT_PAUSE`] ago.
    async fn connect(&self) -> Result<Conn, StoreError> {
        let refused = || StoreError::Connect {
            url: self.name.clone(),
            source: redis::RedisError::from(std::io::Error::new(
                std::io::ErrorKind::NotConnected,
                "the last attempt to connect failed less than a second ago",
            )),
        };
        let recently_failed = self
            .failed_at
            .lock()
            .expect("failed_at mutex poisoned: a panic while storing an Instant")
            .is_some_and(|at| at.elapsed() < RECONNECT_PAUSE);
        if recently_failed {
            return Err(refused());
        }
        let source = match tokio::time::timeout(self.connect_timeout, self.link.connect()).await {
            Ok(Ok(conn)) => return Ok(self.conn.get_or_init(|| async { conn }).await.clone()),
            Ok(Err(source)) => source,
            Err(_) => redis::RedisError::from(std::io::Error::from(std::io::ErrorKind::TimedOut)),
        };
        *self
            .failed_at
            .lock()
            .expect("failed_at mutex poisoned: a panic while storing an Instant") =
            Some(Instant::now());
        Err(StoreError::Connect {
            url: self.name.clone(),
            source,
        })
    }
}

/// A request sent to a node whose answer was not waited for: it may or may
/// not have taken effect.
fn unanswered() -> StoreError {
    StoreError::Redis(redis::RedisError::from(std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        "not waited for: a majority had answered",
    )))
}

/// Whether a failed command may be sent to another node instead (the node
/// is away, not the request wrong).
fn node_away(e: &StoreError) -> bool {
    match e {
        StoreError::Connect { .. } => true,
        StoreError::Redis(e) => {
            e.is_timeout()
                || e.is_connection_dropped()
                || e.is_io_error()
                || e.is_connection_refusal()
        }
        _ => false,
    }
}

impl Store {
    /// How long a command may take before it counts as failed.
    pub fn command_timeout(&self) -> Duration {
        self.command_timeout
    }

    /// Connects (one attempt, bounded by `connect_timeout`); with `quorum`,
    /// to at least a majority of the masters (the others when they answer).
    pub async fn connect(config: &RedisConfig) -> Result<Store, StoreError> {
        let store = Store::connect_lazily(config)?;
        let connected = store.on_all(|conn| async move { Ok(conn) }).await;
        store.gather("connect", connected)?;
        Ok(store)
    }

    /// A store with connections of its own, none shared with any other
    /// `Store`, each made on first use (so a Redis that is down now is not
    /// an error yet). The dashboard reads through one, so that its reads
    /// never queue behind, or in front of, the claims and renewals.
    pub fn connect_lazily(config: &RedisConfig) -> Result<Store, StoreError> {
        let nodes: Arc<[Node]> = Link::nodes(config)?
            .into_iter()
            .map(|(name, link)| Node {
                name,
                link,
                conn: tokio::sync::OnceCell::new(),
                failed_at: Mutex::new(None),
                connect_timeout: config.connect_timeout + config.command_timeout,
            })
            .collect();
        Ok(Store {
            nodes,
            command_timeout: config.command_timeout,
            keys: Arc::new(Keys::new(&config.key_prefix)),
            scripts: Arc::new(Scripts::new()),
            wait_replicas: (config.min_replicas_ack > 0)
                .then_some((config.min_replicas_ack, config.ack_timeout)),
        })
    }

    /// Whether this store speaks to a quorum of independent masters.
    pub fn is_quorum(&self) -> bool {
        self.nodes.len() > 1
    }

    fn majority(&self) -> usize {
        self.nodes.len() / 2 + 1
    }

    /// Runs `f` on every node at once; one result per node, in order.
    async fn on_all<T, F, Fut>(&self, f: F) -> Vec<Result<T, StoreError>>
    where
        F: Fn(Conn) -> Fut,
        Fut: Future<Output = Result<T, StoreError>>,
    {
        self.on_all_until(f, |_| false, Duration::ZERO)
            .await
            .into_iter()
            .map(|result| result.unwrap_or_else(|| Err(unanswered())))
            .collect()
    }

    /// Runs `f` on every node until a majority answered with what
    /// `granted` accepts, then [`STRAGGLER_GRACE`] longer for the others
    /// (see [`Store::on_all_until`]). One result per node, in order; a
    /// node that did not answer in time is an [`unanswered`] error (maybe
    /// sent, maybe not).
    async fn on_all_until_majority<T, F, Fut>(
        &self,
        f: F,
        granted: impl Fn(&T) -> bool,
    ) -> Vec<Result<T, StoreError>>
    where
        F: Fn(Conn) -> Fut,
        Fut: Future<Output = Result<T, StoreError>>,
    {
        let majority = self.majority();
        self.on_all_until(
            f,
            |replies| {
                replies
                    .iter()
                    .filter(|reply| matches!(reply, Some(Ok(reply)) if granted(reply)))
                    .count()
                    >= majority
            },
            STRAGGLER_GRACE,
        )
        .await
        .into_iter()
        .map(|reply| reply.unwrap_or_else(|| Err(unanswered())))
        .collect()
    }

    /// Runs `f` on every node at once, until `settled` says the answers so
    /// far decide the matter (a hung master must not hold up a claim a
    /// majority already granted) and then `grace` longer for the others, or
    /// until every node answered. One slot per node, in order; `None` where
    /// no answer came in time, which the caller must treat as maybe sent,
    /// maybe not.
    async fn on_all_until<T, F, Fut>(
        &self,
        f: F,
        settled: impl Fn(&[Option<Result<T, StoreError>>]) -> bool,
        grace: Duration,
    ) -> Vec<Option<Result<T, StoreError>>>
    where
        F: Fn(Conn) -> Fut,
        Fut: Future<Output = Result<T, StoreError>>,
    {
        use futures_util::StreamExt;
        if let [node] = &*self.nodes {
            let result = match node.conn().await {
                Ok(conn) => f(conn).await,
                Err(e) => Err(e),
            };
            return vec![Some(result)];
        }
        let f = &f;
        let mut pending: futures_util::stream::FuturesUnordered<_> = self
            .nodes
            .iter()
            .enumerate()
            .map(|(i, node)| async move {
                let result = match node.conn().await {
                    Ok(conn) => f(conn).await,
                    Err(e) => Err(e),
                };
                (i, result)
            })
            .collect();
        let mut results: Vec<Option<Result<T, StoreError>>> =
            self.nodes.iter().map(|_| None).collect();
        while let Some((i, result)) = pending.next().await {
            results[i] = Some(result);
            if settled(&results) {
                break;
            }
        }
        if !pending.is_empty() {
            let stragglers = async {
                while let Some((i, result)) = pending.next().await {
                    results[i] = Some(result);
                }
            };
            let _all_answered_in_time = tokio::time::timeout(grace, stragglers).await;
        }
        results
    }

    /// The answers of a majority of nodes to a write, or why there is no
    /// majority. With one node, its answer or its own error.
    fn gather<T>(
        &self,
        what: &'static str,
        results: Vec<Result<T, StoreError>>,
    ) -> Result<Vec<T>, StoreError> {
        let mut answers = Vec::with_capacity(results.len());
        let mut errors = Vec::new();
        for (node, result) in self.nodes.iter().zip(results) {
            match result {
                Ok(answer) => answers.push(answer),
                Err(e) => errors.push((node, e)),
            }
        }
        if !self.is_quorum()
            && let Some((_, e)) = errors.pop()
        {
            return Err(e);
        }
        if answers.len() >= self.majority() {
            return Ok(answers);
        }
        Err(StoreError::NoQuorum {
            what,
            reachable: false,
            detail: format!(
                "{} of {} Redis masters answered, {} needed ({})",
                answers.len(),
                self.nodes.len(),
                self.majority(),
                errors
                    .iter()
                    .map(|(node, e)| format!("{}: {e}", node.name))
                    .collect::<Vec<_>>()
                    .join("; ")
            ),
        })
    }

    /// Runs `f` on the first node that answers: reads, which any master of
    /// a quorum can serve (the one that answers first may lag behind).
    async fn read<T, F, Fut>(&self, f: F) -> Result<T, StoreError>
    where
        F: Fn(Conn) -> Fut,
        Fut: Future<Output = Result<T, redis::RedisError>>,
    {
        let mut away = Vec::new();
        for node in self.nodes.iter() {
            let result = match node.conn().await {
                Ok(conn) => f(conn).await.map_err(StoreError::from),
                Err(e) => Err(e),
            };
            match result {
                Err(e) if self.is_quorum() && node_away(&e) => {
                    away.push(format!("{}: {e}", node.name))
                }
                other => return other,
            }
        }
        Err(StoreError::NoQuorum {
            what: "read",
            reachable: false,
            detail: format!("no Redis master answered ({})", away.join("; ")),
        })
    }

    /// Runs a script on every node; the answers of a majority (see
    /// [`Store::gather`]).
    async fn invoke_on_all<T: redis::FromRedisValue>(
        &self,
        what: &'static str,
        invocation: &redis::ScriptInvocation<'_>,
    ) -> Result<Vec<T>, StoreError> {
        let answers = self
            .on_all(|mut conn| async move { Ok(invocation.invoke_async::<T>(&mut conn).await?) })
            .await;
        self.gather(what, answers)
    }

    /// Sends `cmd` to the first node that answers (see [`Store::read`]).
    async fn read_cmd<T: redis::FromRedisValue>(&self, cmd: redis::Cmd) -> Result<T, StoreError> {
        let cmd = &cmd;
        self.read(|mut conn| async move { cmd.query_async(&mut conn).await })
            .await
    }

    /// The connection of the only node; quorum mode has no such thing.
    async fn single(&self, what: &'static str) -> Result<Conn, StoreError> {
        match &*self.nodes {
            [node] => node.conn().await,
            _ => Err(StoreError::QuorumUnsupported { what }),
        }
    }

    /// Sends the pipeline `build` makes, whose scripts are all `script`;
    /// if Redis does not know the script yet, loads it and sends again (a
    /// NOSCRIPT reply means nothing ran).
    async fn query_with_script(
        &self,
        mut conn: Conn,
        script: &Script,
        build: impl Fn() -> redis::Pipeline,
    ) -> Result<Vec<Value>, StoreError> {
        let result: Result<Vec<Value>, redis::RedisError> = build().query_async(&mut conn).await;
        match result {
            Err(e) if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) => {
                script.prepare_invoke().load_async(&mut conn).await?;
                Ok(build().query_async(&mut conn).await?)
            }
            other => Ok(other?),
        }
    }

    /// Whether calls of a script that batches (the claim, the finish) on
    /// `conn` may share a batch: one node (not `quorum`), not Cluster, and
    /// no `WAIT` after each call.
    fn batches(&self, conn: &Conn) -> bool {
        !self.is_quorum() && self.wait_replicas.is_none() && conn.batches()
    }

    pub fn keys(&self) -> &Keys {
        &self.keys
    }

    /// Redis server time, ms since the epoch.
    pub async fn server_time_ms(&self) -> Result<i64, StoreError> {
        Ok(self.server_time_us().await?.div_euclid(1000))
    }

    /// Redis's clock, µs since the epoch.
    pub async fn server_time_us(&self) -> Result<i64, StoreError> {
        let (secs, micros): (i64, i64) = self
            .read(|mut conn| async move { redis::cmd("TIME").query_async(&mut conn).await })
            .await?;
        time_us(secs, micros).ok_or_else(|| StoreError::Protocol {
            what: "TIME",
            reply: format!("[{secs}, {micros}]"),
        })
    }

    /// Reads the eviction and persistence settings of every node, with
    /// the node's name.
    pub async fn server_settings(&self) -> Vec<(String, Result<ServerSettings, StoreError>)> {
        let settings = self.on_all(Self::settings_on).await;
        self.nodes
            .iter()
            .map(|node| node.name.clone())
            .zip(settings)
            .collect()
    }

    async fn settings_on(mut conn: Conn) -> Result<ServerSettings, StoreError> {
        let reply: Result<Vec<String>, redis::RedisError> = redis::cmd("CONFIG")
            .arg("GET")
            .arg("maxmemory")
            .arg("maxmemory-policy")
            .arg("appendonly")
            .arg("save")
            .query_async(&mut conn)
            .await;
        let pairs = match reply {
            Ok(pairs) => pairs,
            Err(e)
                if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::ResponseError)
                    || e.code().is_some() =>
            {
                return Ok(ServerSettings::Unknown(e.to_string()));
            }
            Err(e) => return Err(e.into()),
        };
        let get = |name: &str| {
            pairs
                .chunks(2)
                .find(|pair| pair[0] == name)
                .and_then(|pair| pair.get(1).cloned())
                .unwrap_or_default()
        };
        Ok(ServerSettings::Known {
            maxmemory: get("maxmemory").parse().unwrap_or(0),
            policy: get("maxmemory-policy"),
            appendonly: get("appendonly") == "yes",
            save: get("save"),
        })
    }
}

impl Store {
    /// A pub/sub connection subscribed to the claims channel.
    ///
    /// With `quorum`, on the first master that accepts: every claim is
    /// announced on each master it reached, and a gap only costs claims.
    pub async fn claims_subscriber(&self) -> Result<redis::aio::PubSub, StoreError> {
        self.subscriber(self.keys.claims_channel()).await
    }

    /// A subscription to the notification wake-ups (the key of each events
    /// stream a script wrote to), on the first node that takes it.
    pub async fn notify_subscriber(&self) -> Result<redis::aio::PubSub, StoreError> {
        self.subscriber(&self.keys.notify_channel()).await
    }

    async fn subscriber(&self, channel: &str) -> Result<redis::aio::PubSub, StoreError> {
        let (last, others) = self
            .nodes
            .split_last()
            .expect("a store has a node per configured URL, and the config has at least one");
        for node in others {
            if let Ok(mut pubsub) = node.link.pubsub().await {
                pubsub.subscribe(channel).await?;
                return Ok(pubsub);
            }
        }
        let mut pubsub = last.link.pubsub().await?;
        pubsub.subscribe(channel).await?;
        Ok(pubsub)
    }
}

/// Appends the arguments `args` holds to `pipe`'s last command.
fn append(pipe: &mut redis::Pipeline, args: &redis::Cmd) {
    for arg in args.args_iter() {
        if let redis::Arg::Simple(bytes) = arg {
            pipe.arg(bytes);
        }
    }
}

fn duration_ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scripts_hold_the_bounds_the_replica_checks() {
        for line in [
            format!("local MAX_AHEAD_MS = {MAX_CLAIM_AHEAD_MS}\n"),
            format!("local MAX_FENCE = {MAX_FENCE}\n"),
        ] {
            assert!(PRELUDE.contains(&line), "prelude.lua lacks {line:?}");
        }
    }
}
