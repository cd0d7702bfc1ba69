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
use crate::link::{Conn, Link, LinkError};
use crate::membership::Heartbeat;
use crate::outcome::{Outcome, Trigger};

mod keys;
mod lock;
mod triggers;

pub use keys::Keys;
pub use lock::{LOCK_IDLE_TTL, LockReply};
pub use triggers::{ManualReply, ManualRequest, TRIGGER_GROUP, TriggerReader, TriggerRequest};

const PRELUDE: &str = include_str!("../lua/prelude.lua");

/// The dedup window's age limit: a second delivery of an outcome (a retry
/// after a lost reply, a spooled copy) recorded less than this long ago is
/// recognised as a duplicate. See [`dedup_entries`] for the count limit.
pub const DEDUP_WINDOW: Duration = Duration::from_secs(7 * 24 * 3600);

/// How long a replica may be silent before its heartbeat entry and its
/// consumer of the triggers stream are removed: long after every sweep of
/// its runs and every takeover of its pending requests.
pub const REPLICA_FORGET_AFTER: Duration = Duration::from_secs(24 * 3600);

/// The fewest run ids a job's dedup window remembers, however small its
/// `history`.
pub const DEDUP_MIN_ENTRIES: u32 = 100;

/// How many run ids a job's dedup window remembers: its `history` (at least
/// [`DEDUP_MIN_ENTRIES`]), so a job's keys in Redis hold at most about
/// 2 × `history` entries whatever its run rate. A delivery past the window
/// is recorded marked stale, never as a second current outcome.
pub fn dedup_entries(history: u32) -> u32 {
    history.max(DEDUP_MIN_ENTRIES)
}

/// How far ahead of Redis time a tick may be and still be claimed. Zero: no
/// run ever starts before its tick by Redis time; a replica that wakes a
/// millisecond early pays one more round trip.
pub const EARLY_TOLERANCE_MS: i64 = 0;

/// Whether a heartbeat also reads the Redis clock (the replica measures
/// its offset every few heartbeats, not every one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerTime {
    Read,
    Skip,
}

struct Scripts {
    claim: Script,
    renew: Script,
    finish: Script,
    sweep: Script,
    manual: Script,
    lock_acquire: Script,
    lock_release: Script,
    forget_replica: Script,
    pause: Script,
    missed: Script,
    release: Script,
    raise_fence: Script,
}

impl Scripts {
    fn new() -> Scripts {
        let script = |body: &str| Script::new(&format!("{PRELUDE}\n{body}"));
        Scripts {
            claim: script(include_str!("../lua/claim.lua")),
            renew: script(include_str!("../lua/renew.lua")),
            finish: script(include_str!("../lua/finish.lua")),
            sweep: script(include_str!("../lua/sweep.lua")),
            manual: script(include_str!("../lua/manual.lua")),
            lock_acquire: script(include_str!("../lua/lock_acquire.lua")),
            lock_release: script(include_str!("../lua/lock_release.lua")),
            forget_replica: Script::new(include_str!("../lua/forget_replica.lua")),
            pause: Script::new(include_str!("../lua/pause.lua")),
            missed: script(include_str!("../lua/missed.lua")),
            release: Script::new(include_str!("../lua/release.lua")),
            raise_fence: Script::new(include_str!("../lua/raise_fence.lua")),
        }
    }
}

/// A failed exchange with Redis.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("cannot connect to Redis at {url}: {source}")]
    Connect {
        url: String,
        #[source]
        source: redis::RedisError,
    },
    #[error("redis: {0}")]
    Redis(#[from] redis::RedisError),
    #[error(transparent)]
    Link(#[from] LinkError),
    #[error("unexpected reply from Redis to {what}: {reply:?}")]
    Protocol { what: &'static str, reply: String },
    /// Quorum mode: fewer than a majority of the masters agreed.
    #[error("quorum not reached for {what}: {detail}")]
    NoQuorum {
        what: &'static str,
        detail: String,
        /// A majority of the masters answered, but their answers split
        /// (replicas racing): Redis is reachable.
        reachable: bool,
    },
    #[error(
        "{what} is not available with `[redis] quorum` in this version: it needs a single Redis, Sentinel or Cluster"
    )]
    QuorumUnsupported { what: &'static str },
}

impl StoreError {
    /// True when the command may or may not have been executed (timeout,
    /// dropped connection): the caller must read back, not guess.
    pub fn is_ambiguous(&self) -> bool {
        match self {
            StoreError::Redis(e) => e.is_timeout() || e.is_connection_dropped() || e.is_io_error(),
            // A claim without a majority was undone where it landed; one
            // that landed unheard on a minority lapses with its lease.
            StoreError::Connect { .. }
            | StoreError::Link(_)
            | StoreError::Protocol { .. }
            | StoreError::NoQuorum { .. }
            | StoreError::QuorumUnsupported { .. } => false,
        }
    }
}

fn protocol(what: &'static str, reply: &Value) -> StoreError {
    StoreError::Protocol {
        what,
        reply: format!("{reply:?}"),
    }
}

fn as_string(value: &Value) -> Option<String> {
    match value {
        Value::BulkString(bytes) => String::from_utf8(bytes.clone()).ok(),
        Value::SimpleString(s) => Some(s.clone()),
        Value::Int(n) => Some(n.to_string()),
        Value::Okay => Some("OK".to_string()),
        _ => None,
    }
}

fn as_int(value: &Value) -> Option<i64> {
    match value {
        Value::Int(n) => Some(*n),
        Value::BulkString(bytes) => std::str::from_utf8(bytes).ok()?.parse().ok(),
        Value::SimpleString(s) => s.parse().ok(),
        _ => None,
    }
}

fn as_array(value: Value, what: &'static str) -> Result<Vec<Value>, StoreError> {
    match value {
        Value::Array(items) => Ok(items),
        other => Err(protocol(what, &other)),
    }
}

/// Everything the claim script needs to know.
#[derive(Debug, Clone)]
pub struct ClaimRequest<'a> {
    pub job: &'a str,
    pub tick_ms: i64,
    pub run_id: &'a str,
    pub lease: Duration,
    pub overlap: Overlap,
    pub replica: &'a str,
    pub host: &'a str,
    pub history: u32,
    /// The highest `last_tick` this replica has seen for the job (-1: none).
    pub min_tick: i64,
    /// The highest fence this replica has seen for the job.
    pub min_fence: u64,
    pub trigger: Trigger,
    /// For catch-up of missed ticks: answer `Wait` while a run is in flight
    /// instead of recording `skipped_overlap`.
    pub wait_if_busy: bool,
    /// Redis time after which the claim must take no effect: an attempt
    /// that reaches Redis later (it sat in a paused server or a slow
    /// network after its caller stopped waiting) answers `Expired`.
    pub deadline_ms: i64,
}

/// The claim script's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaimReply {
    /// We hold the tick: run it under this fence.
    Claimed {
        fence: u64,
        /// Redis time of the claim.
        started_ms: i64,
        lease_key: String,
        /// Runs of this job in flight whose lease lapsed: a sweep is due.
        expired: u32,
        /// Redis had forgotten a tick or fence this replica remembered.
        regressed: bool,
        /// The high-water mark before this claim (-1: none, -2: unknown, a
        /// retry of a claim that had won); schedule ticks between it and
        /// this tick were missed.
        previous: i64,
        /// With `min_replicas_ack`: how many replicas acknowledged the claim
        /// within `ack_timeout` (`WAIT`).
        acked: Option<u32>,
    },
    /// The tick is this far ahead of Redis time; ask again then.
    Early { ms: i64 },
    /// Someone claimed it (or a later tick) already. `fence` is the job's
    /// current fence.
    Taken {
        last_tick: i64,
        regressed: bool,
        fence: u64,
    },
    /// The job is paused; the tick is skipped.
    Paused {
        regressed: bool,
        previous: i64,
        fence: u64,
    },
    /// A run is in flight and `overlap = "skip"`: recorded as skipped.
    Busy {
        holder: String,
        regressed: bool,
        previous: i64,
        fence: u64,
    },
    /// Catch-up only: a run is in flight; ask again in this many ms.
    Wait { ms: i64 },
    /// The claim ran after its deadline (this many ms after the tick) and
    /// took no effect; no earlier attempt with this run id can win any more.
    Expired { late_ms: i64 },
    /// An earlier attempt with this run id won, but its lease lapsed before
    /// we heard of it: the run must not start (a sweep records it).
    Lapsed,
}

/// One run's renewal, as the watchdog sends it.
#[derive(Debug, Clone)]
pub struct Renewal {
    pub job: String,
    pub run_id: String,
    pub lease_key: String,
}

/// How the finish script recorded an outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recorded {
    /// As the tick's current outcome.
    Current,
    /// Marked stale: someone had already recorded this run (abandoned).
    Stale,
    /// Not again: this outcome was recorded before (a retry, a spooled copy).
    Duplicate,
}

/// What the finish script did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FinishReply {
    pub recorded: Recorded,
    /// The stream entry id.
    pub id: String,
    /// A pending rerun started for the caller now that the lease is free.
    pub rerun: Option<Rerun>,
}

/// Lets the finish script start a pending rerun of the job for the caller.
#[derive(Debug, Clone)]
pub struct RerunOffer<'a> {
    pub overlap: Overlap,
    pub lease: Duration,
    pub new_run_id: &'a str,
    pub min_fence: u64,
    pub replica: &'a str,
    pub host: &'a str,
}

/// A sweep request for one job.
#[derive(Debug, Clone)]
pub struct SweepRequest<'a> {
    pub job: &'a str,
    pub replica: &'a str,
    pub host: &'a str,
    pub history: u32,
    pub rerun: bool,
    pub overlap: Overlap,
    pub lease: Duration,
    /// Used only if a rerun is started.
    pub new_run_id: &'a str,
    pub min_fence: u64,
}

/// A rerun claimed by a sweep, for the caller to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rerun {
    pub tick_ms: i64,
    pub fence: u64,
    pub lease_key: String,
    pub started_ms: i64,
}

/// What a sweep found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SweepReply {
    pub abandoned: u32,
    pub rerun: Option<Rerun>,
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

/// The outcome of writing a heartbeat.
#[derive(Debug, Clone)]
pub struct HeartbeatReply {
    /// The deployment's epoch after this heartbeat, per answering master
    /// (one with a single Redis, Sentinel or Cluster).
    pub epochs: Vec<Epoch>,
    /// Redis time, when the heartbeat asked for it.
    pub server_ms: Option<i64>,
    /// Every replica's heartbeat JSON, ours included.
    pub replicas: Vec<(String, String)>,
}

/// One Redis master's epoch, as a heartbeat read it.
#[derive(Debug, Clone)]
pub struct Epoch {
    /// The master, for logs (credentials redacted).
    pub node: String,
    pub epoch: String,
    /// We created the epoch key (it was missing).
    pub created: bool,
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
    /// Connects (one attempt, bounded by `connect_timeout`); with `quorum`,
    /// to at least a majority of the masters (the others when they answer).
    pub async fn connect(config: &RedisConfig) -> Result<Store, StoreError> {
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
        let store = Store {
            nodes,
            command_timeout: config.command_timeout,
            keys: Arc::new(Keys::new(&config.key_prefix)),
            scripts: Arc::new(Scripts::new()),
            wait_replicas: (config.min_replicas_ack > 0)
                .then_some((config.min_replicas_ack, config.ack_timeout)),
        };
        let connected = store.on_all(|conn| async move { Ok(conn) }).await;
        store.gather("connect", connected)?;
        Ok(store)
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

    pub fn keys(&self) -> &Keys {
        &self.keys
    }

    /// Redis server time, ms since the epoch.
    pub async fn server_time_ms(&self) -> Result<i64, StoreError> {
        self.read(|mut conn| async move {
            let (secs, micros): (i64, i64) = redis::cmd("TIME").query_async(&mut conn).await?;
            Ok(secs * 1000 + micros / 1000)
        })
        .await
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

    /// Runs the claim script; with `min_replicas_ack`, followed by `WAIT`
    /// in the same pipeline on the same connection. With `quorum`, on every
    /// master at once: see [`Store::claim_quorum`].
    pub async fn claim(&self, request: &ClaimRequest<'_>) -> Result<ClaimReply, StoreError> {
        if self.is_quorum() {
            return self.claim_quorum(request).await;
        }
        self.claim_on(self.single("claim").await?, request).await
    }

    /// The claim over a quorum (the Redlock idea). Sent to every master at
    /// once with one run id; it holds only when a majority answered
    /// `claimed` and the lease, less the time the round took and a clock
    /// drift allowance, has time left. Its fence is the highest of the
    /// majority's, and a second round raises every master's fence to it
    /// (a majority must answer): a later claim's majority shares a master
    /// with this one, so its fence is higher. A claim that does not hold
    /// is undone on the masters where it landed, so that the tick can
    /// still be claimed.
    async fn claim_quorum(&self, request: &ClaimRequest<'_>) -> Result<ClaimReply, StoreError> {
        let sent = Instant::now();
        let majority = self.majority();
        let replies: Vec<Result<ClaimReply, StoreError>> = self
            .on_all_until(
                |conn| async move { self.claim_on(conn, request).await },
                |replies| {
                    replies
                        .iter()
                        .filter(|r| matches!(r, Some(Ok(ClaimReply::Claimed { .. }))))
                        .count()
                        >= majority
                },
                STRAGGLER_GRACE,
            )
            .await
            .into_iter()
            .map(|reply| reply.unwrap_or_else(|| Err(unanswered())))
            .collect();
        let drift = request.lease / 100 + Duration::from_millis(2);
        let answers: Vec<&ClaimReply> = replies
            .iter()
            .filter_map(|reply| reply.as_ref().ok())
            .collect();
        let agreed = majority_answer(&answers, majority);
        let mut valid = request.lease > sent.elapsed() + drift;
        if valid && let Some(claimed @ ClaimReply::Claimed { fence, .. }) = &agreed {
            let fence = *fence;
            let state = self.keys.state(request.job);
            let state = &state;
            let raised = self
                .on_all_until(
                    |mut conn| async move {
                        let raised: i64 = self
                            .scripts
                            .raise_fence
                            .key(state)
                            .arg(fence)
                            .invoke_async(&mut conn)
                            .await?;
                        Ok(raised)
                    },
                    |raised| raised.iter().filter(|r| matches!(r, Some(Ok(_)))).count() >= majority,
                    STRAGGLER_GRACE,
                )
                .await
                .into_iter()
                .map(|raised| raised.unwrap_or_else(|| Err(unanswered())))
                .collect();
            valid = request.lease > sent.elapsed() + drift;
            match self.gather("claim (raising the fence)", raised) {
                Ok(_) if valid => return Ok(claimed.clone()),
                Ok(_) => {}
                Err(e) => {
                    self.release_claims(request, &replies).await;
                    return Err(e);
                }
            }
        }
        self.release_claims(request, &replies).await;
        if let Some(reply) = agreed.filter(|reply| !matches!(reply, ClaimReply::Claimed { .. })) {
            return Ok(reply);
        }
        let won = answers.iter().filter(|a| a.kind() == "claimed").count();
        let described: Vec<String> = self
            .nodes
            .iter()
            .zip(&replies)
            .map(|(node, reply)| match reply {
                Ok(reply) => format!("{}: {}", node.name, reply.kind()),
                Err(e) => format!("{}: {e}", node.name),
            })
            .collect();
        Err(StoreError::NoQuorum {
            what: "claim",
            reachable: replies.iter().filter(|reply| reply.is_ok()).count() >= self.majority(),
            detail: format!(
                "{} of {} Redis masters claimed the tick{}, {} needed ({})",
                won,
                self.nodes.len(),
                if valid {
                    ""
                } else {
                    " but too late for the lease"
                },
                self.majority(),
                described.join("; ")
            ),
        })
    }

    /// Undoes this run id's claim on each master where it landed (or may
    /// have: an unanswered attempt), best effort: a claim left behind
    /// lapses with its lease, and a sweep records it abandoned.
    async fn release_claims(
        &self,
        request: &ClaimRequest<'_>,
        replies: &[Result<ClaimReply, StoreError>],
    ) {
        let releases = self.nodes.iter().zip(replies).filter_map(|(node, reply)| {
            let previous = match reply {
                Ok(ClaimReply::Claimed { previous, .. }) => *previous,
                Err(e) if e.is_ambiguous() => -2,
                _ => return None,
            };
            Some(async move {
                let mut conn = node.conn().await?;
                let released: i64 = self
                    .scripts
                    .release
                    .key(self.keys.state(request.job))
                    .key(self.keys.running(request.job))
                    .key(self.keys.lease(request.job))
                    .arg(request.run_id)
                    .arg(request.tick_ms)
                    .arg(previous)
                    .invoke_async(&mut conn)
                    .await?;
                Ok::<_, StoreError>(released)
            })
        });
        for result in futures_util::future::join_all(releases).await {
            if let Err(e) = result {
                tracing::debug!(job = request.job, run_id = request.run_id, error = %e, "could not undo a minority claim; it lapses with its lease");
            }
        }
    }

    async fn claim_on(
        &self,
        conn: Conn,
        request: &ClaimRequest<'_>,
    ) -> Result<ClaimReply, StoreError> {
        let keys = &self.keys;
        let build = || {
            let mut pipe = redis::pipe();
            pipe.cmd("EVALSHA")
                .arg(self.scripts.claim.get_hash())
                .arg(4)
                .arg(keys.state(request.job))
                .arg(keys.running(request.job))
                .arg(keys.lease(request.job))
                .arg(keys.runs(request.job))
                .arg(request.tick_ms)
                .arg(request.run_id)
                .arg(duration_ms(request.lease))
                .arg(request.overlap.as_str())
                .arg(request.replica)
                .arg(request.host)
                .arg(EARLY_TOLERANCE_MS)
                .arg(request.history)
                .arg(request.min_tick)
                .arg(request.min_fence)
                .arg(request.trigger.as_str())
                .arg(if request.wait_if_busy { "1" } else { "0" })
                .arg(keys.claims_channel())
                .arg(request.job)
                .arg(request.deadline_ms);
            if let Some((replicas, timeout)) = self.wait_replicas {
                pipe.cmd("WAIT").arg(replicas).arg(duration_ms(timeout));
            }
            pipe
        };
        let mut replies = self
            .query_with_script(conn, &self.scripts.claim, build)
            .await?
            .into_iter();
        let mut reply = parse_claim(replies.next().unwrap_or(Value::Nil))?;
        if let (ClaimReply::Claimed { acked, .. }, Some(count)) = (&mut reply, replies.next()) {
            *acked = Some(
                as_int(&count)
                    .ok_or_else(|| protocol("WAIT", &count))?
                    .max(0) as u32,
            );
        }
        Ok(reply)
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

    /// The job's high-water mark, if it has one.
    /// With `quorum`, the highest of a majority's.
    pub async fn last_tick(&self, job: &str) -> Result<Option<i64>, StoreError> {
        let key = self.keys.state(job);
        let key = &key;
        let answers = self
            .on_all(|mut conn| async move {
                let raw: Option<i64> = redis::cmd("HGET")
                    .arg(key)
                    .arg("last_tick")
                    .query_async(&mut conn)
                    .await?;
                Ok(raw)
            })
            .await;
        Ok(self
            .gather("last_tick", answers)?
            .into_iter()
            .flatten()
            .max())
    }

    /// Renews every lease in `renewals` in one pipeline; `true` where the
    /// lease is still ours (with `quorum`: on a majority of the masters).
    pub async fn renew(
        &self,
        renewals: &[Renewal],
        lease: Duration,
    ) -> Result<Vec<bool>, StoreError> {
        if renewals.is_empty() {
            return Ok(Vec::new());
        }
        let lease_ms = duration_ms(lease);
        let build = || {
            let mut pipe = redis::pipe();
            for renewal in renewals {
                pipe.cmd("EVALSHA")
                    .arg(self.scripts.renew.get_hash())
                    .arg(2)
                    .arg(&renewal.lease_key)
                    .arg(self.keys.running(&renewal.job))
                    .arg(&renewal.run_id)
                    .arg(lease_ms);
            }
            pipe
        };
        let build = &build;
        let answers = self
            .on_all(|conn| async move {
                let replies = self
                    .query_with_script(conn, &self.scripts.renew, build)
                    .await?;
                Ok(replies
                    .iter()
                    .map(|r| as_int(r) == Some(1))
                    .collect::<Vec<bool>>())
            })
            .await;
        let answers = self.gather("renew", answers)?;
        Ok((0..renewals.len())
            .map(|i| {
                answers
                    .iter()
                    .filter(|held| held.get(i) == Some(&true))
                    .count()
                    >= self.majority()
            })
            .collect())
    }

    /// Runs the finish script for `outcome`; with `rerun`, a pending rerun
    /// of the job may be started for the caller.
    pub async fn finish(
        &self,
        outcome: &Outcome,
        history: u32,
        rerun: Option<&RerunOffer<'_>>,
    ) -> Result<FinishReply, StoreError> {
        let keys = &self.keys;
        let job = outcome.job.as_str();
        let mut invocation = self.scripts.finish.prepare_invoke();
        invocation
            .key(keys.state(job))
            .key(keys.running(job))
            .key(&outcome.lease_key)
            .key(keys.runs(job))
            .key(keys.done(job))
            .key(keys.lease(job))
            .key(keys.reruns(job))
            .key(keys.done_at(job))
            .arg(&outcome.run_id)
            .arg(history)
            .arg(duration_ms(DEDUP_WINDOW))
            .arg(dedup_entries(history));
        match rerun {
            Some(offer) => invocation
                .arg("1")
                .arg(offer.overlap.as_str())
                .arg(duration_ms(offer.lease))
                .arg(offer.new_run_id)
                .arg(offer.min_fence)
                .arg(offer.replica)
                .arg(offer.host),
            None => invocation
                .arg("0")
                .arg("skip")
                .arg(0)
                .arg("")
                .arg(0)
                .arg("")
                .arg(""),
        };
        for (name, value) in outcome.stream_fields() {
            invocation.arg(name).arg(value);
        }
        let invocation = &invocation;
        let answers = self
            .on_all(|mut conn| async move {
                let reply: Value = invocation.invoke_async(&mut conn).await?;
                parse_finish(reply)
            })
            .await;
        // With `quorum`: the outcome is recorded once a majority has it (a
        // retry or the spool sends it again; the done marker makes that a
        // no-op where it landed). The current record, if any, is the answer.
        let mut answers = self.gather("finish", answers)?;
        let best = answers
            .iter()
            .position(|a| a.recorded == Recorded::Current)
            .unwrap_or(0);
        Ok(answers.swap_remove(best))
    }

    /// Runs the sweep script for one job.
    pub async fn sweep(&self, request: &SweepRequest<'_>) -> Result<SweepReply, StoreError> {
        let keys = &self.keys;
        let mut invocation = self.scripts.sweep.prepare_invoke();
        invocation
            .key(keys.state(request.job))
            .key(keys.running(request.job))
            .key(keys.lease(request.job))
            .key(keys.runs(request.job))
            .key(keys.reruns(request.job))
            .arg(request.replica)
            .arg(request.host)
            .arg(request.history)
            .arg(if request.rerun { "1" } else { "0" })
            .arg(request.overlap.as_str())
            .arg(duration_ms(request.lease))
            .arg(request.new_run_id)
            .arg(request.min_fence);
        let invocation = &invocation;
        let answers = self
            .on_all(|mut conn| async move {
                let reply: Value = invocation.invoke_async(&mut conn).await?;
                let items = as_array(reply, "sweep")?;
                let abandoned = items
                    .first()
                    .and_then(as_int)
                    .ok_or_else(|| protocol("sweep", &Value::Nil))?;
                Ok(SweepReply {
                    abandoned: u32::try_from(abandoned).unwrap_or(0),
                    rerun: parse_rerun(&items, 1, "sweep")?,
                })
            })
            .await;
        // With `quorum` each master records the runs whose lease lapsed
        // there; reruns are not offered (the config refuses them).
        let answers = self.gather("sweep", answers)?;
        Ok(SweepReply {
            abandoned: answers.iter().map(|a| a.abandoned).max().unwrap_or(0),
            rerun: answers.into_iter().find_map(|a| a.rerun),
        })
    }

    /// Writes this replica's heartbeat, reads the epoch (creating it if
    /// missing), every replica's heartbeat and, with [`ServerTime::Read`],
    /// the server time: one round trip (two when the epoch is missing).
    ///
    /// With `quorum`, on every master; a majority must answer. Each
    /// master's epoch is reported on its own, and of two records of one
    /// replica the newer is kept.
    pub async fn heartbeat(
        &self,
        replica: &str,
        record: &str,
        new_epoch: &str,
        time: ServerTime,
    ) -> Result<HeartbeatReply, StoreError> {
        let answers = self
            .on_all(|conn| self.heartbeat_on(conn, replica, record, new_epoch, time))
            .await
            .into_iter()
            .zip(self.nodes.iter())
            .map(|(answer, node)| {
                answer.map(|mut answer| {
                    for epoch in &mut answer.epochs {
                        epoch.node.clone_from(&node.name);
                    }
                    answer
                })
            })
            .collect();
        let answers = self.gather("heartbeat", answers)?;
        let mut merged = HeartbeatReply {
            epochs: Vec::new(),
            server_ms: None,
            replicas: Vec::new(),
        };
        let last_seen = |raw: &str| {
            Heartbeat::parse(raw)
                .map(|record| record.last_seen_ms)
                .unwrap_or(i64::MIN)
        };
        for answer in answers {
            merged.epochs.extend(answer.epochs);
            merged.server_ms = merged.server_ms.or(answer.server_ms);
            for (id, raw) in answer.replicas {
                match merged.replicas.iter_mut().find(|(seen, _)| *seen == id) {
                    Some(known) if last_seen(&known.1) < last_seen(&raw) => known.1 = raw,
                    Some(_) => {}
                    None => merged.replicas.push((id, raw)),
                }
            }
        }
        Ok(merged)
    }

    async fn heartbeat_on(
        &self,
        mut conn: Conn,
        replica: &str,
        record: &str,
        new_epoch: &str,
        time: ServerTime,
    ) -> Result<HeartbeatReply, StoreError> {
        let mut pipe = redis::pipe();
        pipe.cmd("HSET")
            .arg(self.keys.replicas())
            .arg(replica)
            .arg(record)
            .ignore()
            .cmd("GET")
            .arg(self.keys.epoch())
            .cmd("HGETALL")
            .arg(self.keys.replicas());
        if time == ServerTime::Read {
            pipe.cmd("TIME");
        }
        let mut replies: Vec<Value> = pipe.query_async(&mut conn).await?;
        let time = match time {
            ServerTime::Read => replies.pop(),
            ServerTime::Skip => None,
        };
        let replicas: Vec<(String, String)> = match replies.pop() {
            Some(value) => redis::from_redis_value(value)
                .map_err(|e| protocol("HGETALL", &Value::SimpleString(e.to_string())))?,
            None => Vec::new(),
        };
        let server_ms = match time {
            Some(Value::Array(parts)) if parts.len() == 2 => {
                let secs = as_int(&parts[0]).unwrap_or(0);
                let micros = as_int(&parts[1]).unwrap_or(0);
                Some(secs * 1000 + micros / 1000)
            }
            _ => None,
        };
        let (epoch, created_epoch) = match replies.pop().as_ref().and_then(as_string) {
            Some(epoch) => (epoch, false),
            None => {
                // First heartbeat of a deployment, or Redis lost its data.
                let created: Option<String> = redis::cmd("SET")
                    .arg(self.keys.epoch())
                    .arg(new_epoch)
                    .arg("NX")
                    .query_async(&mut conn)
                    .await?;
                let epoch: String = redis::cmd("GET")
                    .arg(self.keys.epoch())
                    .query_async(&mut conn)
                    .await?;
                (epoch, created.is_some())
            }
        };
        Ok(HeartbeatReply {
            epochs: vec![Epoch {
                node: String::new(),
                epoch,
                created: created_epoch,
            }],
            server_ms,
            replicas,
        })
    }

    /// Removes this replica's heartbeat and its consumer of the triggers
    /// stream (clean shutdown).
    pub async fn remove_replica(&self, replica: &str) -> Result<(), StoreError> {
        let mut cmd = redis::cmd("HDEL");
        cmd.arg(self.keys.replicas()).arg(replica);
        let cmd = &cmd;
        let answers = self
            .on_all(|mut conn| async move { Ok(cmd.query_async::<i64>(&mut conn).await?) })
            .await;
        self.gather("remove_replica", answers)?;
        self.drop_trigger_consumer(replica).await
    }

    /// Removes the heartbeat entry of `replica`, silent since `last_seen_ms`
    /// for longer than [`REPLICA_FORGET_AFTER`], and its trigger consumer;
    /// `false` if it spoke again meanwhile (then nothing is removed).
    pub async fn forget_replica(
        &self,
        replica: &str,
        last_seen_ms: i64,
    ) -> Result<bool, StoreError> {
        let invocation = {
            let mut invocation = self.scripts.forget_replica.prepare_invoke();
            invocation
                .key(self.keys.replicas())
                .arg(replica)
                .arg(last_seen_ms);
            invocation
        };
        let invocation = &invocation;
        let answers = self
            .on_all(|mut conn| async move { Ok(invocation.invoke_async::<i64>(&mut conn).await?) })
            .await;
        let removed = self
            .gather("forget_replica", answers)?
            .into_iter()
            .any(|n| n == 1);
        if removed {
            self.drop_trigger_consumer(replica).await?;
        }
        Ok(removed)
    }
}

/// A rerun started by a script: four items from `from` on, if present.
fn parse_rerun(
    items: &[Value],
    from: usize,
    what: &'static str,
) -> Result<Option<Rerun>, StoreError> {
    if items.len() < from + 4 {
        return Ok(None);
    }
    let int = |i: usize| as_int(&items[from + i]).ok_or_else(|| protocol(what, &items[from + i]));
    Ok(Some(Rerun {
        tick_ms: int(0)?,
        fence: u64::try_from(int(1)?).unwrap_or(0),
        lease_key: as_string(&items[from + 2]).ok_or_else(|| protocol(what, &items[from + 2]))?,
        started_ms: int(3)?,
    }))
}

impl Store {
    /// The stream id of a run's recorded outcome, once there is one (and
    /// while the dedup window remembers it).
    pub async fn done_marker(&self, job: &str, run_id: &str) -> Result<Option<String>, StoreError> {
        let mut cmd = redis::cmd("HGET");
        cmd.arg(self.keys.done(job)).arg(run_id);
        if let Some(id) = self.read_cmd::<Option<String>>(cmd).await? {
            return Ok(Some(id));
        }
        // A run recorded by a replica of the previous release.
        let mut cmd = redis::cmd("GET");
        cmd.arg(self.keys.legacy_done(job, run_id));
        self.read_cmd(cmd).await
    }

    /// Records `ticks` (ascending) of `job` as missed; returns how many were
    /// new.
    pub async fn record_missed(
        &self,
        job: &str,
        ticks: &[i64],
        recorder: &str,
        host: &str,
        history: u32,
    ) -> Result<u64, StoreError> {
        let mut invocation = self.scripts.missed.prepare_invoke();
        invocation
            .key(self.keys.state(job))
            .key(self.keys.runs(job))
            .arg(recorder)
            .arg(host)
            .arg(history);
        for tick in ticks {
            invocation.arg(*tick);
        }
        let new: Vec<u64> = self.invoke_on_all("record_missed", &invocation).await?;
        Ok(new.into_iter().max().unwrap_or(0))
    }

    /// Pauses a job (with `quorum`: on a majority of the masters); returns
    /// the Redis time it happened.
    pub async fn pause(&self, job: &str, who: &str) -> Result<i64, StoreError> {
        self.pause_script(job, "1", who).await
    }

    /// Resumes a paused job; returns the Redis time it happened.
    pub async fn resume(&self, job: &str, who: &str) -> Result<i64, StoreError> {
        self.pause_script(job, "0", who).await
    }

    /// `pause.lua` with its ARGV[1]: "1" pauses, "0" resumes.
    async fn pause_script(&self, job: &str, paused: &str, who: &str) -> Result<i64, StoreError> {
        let mut invocation = self.scripts.pause.prepare_invoke();
        invocation.key(self.keys.state(job)).arg(paused).arg(who);
        let at: Vec<i64> = self.invoke_on_all("pause", &invocation).await?;
        Ok(at.into_iter().max().unwrap_or(0))
    }

    /// A hash as field → value (state, running, replicas).
    pub async fn hash(&self, key: &str) -> Result<Vec<(String, String)>, StoreError> {
        let mut cmd = redis::cmd("HGETALL");
        cmd.arg(key);
        self.read_cmd(cmd).await
    }

    /// The newest `count` entries of a job's outcome stream, newest first.
    pub async fn history(
        &self,
        job: &str,
        count: usize,
    ) -> Result<Vec<(String, Vec<(String, String)>)>, StoreError> {
        let mut cmd = redis::cmd("XREVRANGE");
        cmd.arg(self.keys.runs(job))
            .arg("+")
            .arg("-")
            .arg("COUNT")
            .arg(count);
        self.read_cmd(cmd).await
    }

    /// One entry of a job's outcome stream.
    pub async fn outcome_entry(
        &self,
        job: &str,
        id: &str,
    ) -> Result<Option<Vec<(String, String)>>, StoreError> {
        let mut cmd = redis::cmd("XRANGE");
        cmd.arg(self.keys.runs(job)).arg(id).arg(id);
        let entries: Vec<(String, Vec<(String, String)>)> = self.read_cmd(cmd).await?;
        Ok(entries.into_iter().next().map(|(_, fields)| fields))
    }

    /// Whether any key of the job exists (for "unknown job" without a config).
    pub async fn job_exists(&self, job: &str) -> Result<bool, StoreError> {
        let mut cmd = redis::cmd("EXISTS");
        cmd.arg(self.keys.state(job)).arg(self.keys.runs(job));
        let n: i64 = self.read_cmd(cmd).await?;
        Ok(n > 0)
    }

    /// A pub/sub connection subscribed to the claims channel.
    ///
    /// With `quorum`, on the first master that accepts: every claim is
    /// announced on each master it reached, and a gap only costs claims.
    pub async fn claims_subscriber(&self) -> Result<redis::aio::PubSub, StoreError> {
        let (last, others) = self
            .nodes
            .split_last()
            .expect("a store has a node per configured URL, and the config has at least one");
        for node in others {
            if let Ok(mut pubsub) = node.link.pubsub().await {
                pubsub.subscribe(self.keys.claims_channel()).await?;
                return Ok(pubsub);
            }
        }
        let mut pubsub = last.link.pubsub().await?;
        pubsub.subscribe(self.keys.claims_channel()).await?;
        Ok(pubsub)
    }
}

fn duration_ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn parse_finish(reply: Value) -> Result<FinishReply, StoreError> {
    let items = as_array(reply, "finish")?;
    let recorded = match items.first().and_then(as_string).as_deref() {
        Some("current") => Recorded::Current,
        Some("stale") => Recorded::Stale,
        Some("duplicate") => Recorded::Duplicate,
        _ => return Err(protocol("finish", &Value::Array(items))),
    };
    Ok(FinishReply {
        recorded,
        id: items.get(1).and_then(as_string).unwrap_or_default(),
        rerun: parse_rerun(&items, 2, "finish")?,
    })
}

fn parse_claim(reply: Value) -> Result<ClaimReply, StoreError> {
    let items = as_array(reply, "claim")?;
    let bad = |items: &[Value]| protocol("claim", &Value::Array(items.to_vec()));
    let kind = items
        .first()
        .and_then(as_string)
        .ok_or_else(|| bad(&items))?;
    let int = |i: usize| items.get(i).and_then(as_int).ok_or_else(|| bad(&items));
    let flag = |i: usize| items.get(i).and_then(as_int).unwrap_or(0) == 1;
    Ok(match kind.as_str() {
        "claimed" => ClaimReply::Claimed {
            fence: int(1)? as u64,
            started_ms: int(2)?,
            lease_key: items
                .get(3)
                .and_then(as_string)
                .ok_or_else(|| bad(&items))?,
            expired: int(4).unwrap_or(0) as u32,
            regressed: flag(5),
            previous: int(6).unwrap_or(-1),
            acked: None,
        },
        "early" => ClaimReply::Early { ms: int(1)? },
        "taken" => ClaimReply::Taken {
            last_tick: int(1)?,
            regressed: flag(2),
            fence: int(3).unwrap_or(0).max(0) as u64,
        },
        "paused" => ClaimReply::Paused {
            regressed: flag(1),
            previous: int(2).unwrap_or(-1),
            fence: int(3).unwrap_or(0).max(0) as u64,
        },
        "busy" => ClaimReply::Busy {
            holder: items.get(1).and_then(as_string).unwrap_or_default(),
            regressed: flag(2),
            previous: int(3).unwrap_or(-1),
            fence: int(4).unwrap_or(0).max(0) as u64,
        },
        "wait" => ClaimReply::Wait { ms: int(1)?.max(1) },
        "expired" => ClaimReply::Expired { late_ms: int(1)? },
        "lapsed" => ClaimReply::Lapsed,
        _ => return Err(bad(&items)),
    })
}

impl ClaimReply {
    /// The answer's name, as the claim script says it.
    pub fn kind(&self) -> &'static str {
        match self {
            ClaimReply::Claimed { .. } => "claimed",
            ClaimReply::Early { .. } => "early",
            ClaimReply::Taken { .. } => "taken",
            ClaimReply::Paused { .. } => "paused",
            ClaimReply::Busy { .. } => "busy",
            ClaimReply::Wait { .. } => "wait",
            ClaimReply::Expired { .. } => "expired",
            ClaimReply::Lapsed => "lapsed",
        }
    }
}

/// The answer a majority of masters gave, merged (the highest fence, tick
/// and wait, the earliest start), if there is one.
fn majority_answer(answers: &[&ClaimReply], majority: usize) -> Option<ClaimReply> {
    let kind = answers
        .iter()
        .map(|a| a.kind())
        .find(|kind| answers.iter().filter(|a| a.kind() == *kind).count() >= majority)?;
    let mut same = answers
        .iter()
        .filter(|a| a.kind() == kind)
        .map(|a| (*a).clone());
    let first = same.next()?;
    Some(same.fold(first, |merged, next| match (merged, next) {
        (
            ClaimReply::Claimed {
                fence,
                started_ms,
                lease_key,
                expired,
                regressed,
                previous,
                acked,
            },
            ClaimReply::Claimed {
                fence: f,
                started_ms: s,
                expired: e,
                regressed: r,
                previous: p,
                ..
            },
        ) => ClaimReply::Claimed {
            fence: fence.max(f),
            started_ms: started_ms.min(s),
            lease_key,
            expired: expired.max(e),
            regressed: regressed || r,
            previous: previous.max(p),
            acked,
        },
        (
            ClaimReply::Taken {
                last_tick,
                regressed,
                fence,
            },
            ClaimReply::Taken {
                last_tick: t,
                regressed: r,
                fence: f,
            },
        ) => ClaimReply::Taken {
            last_tick: last_tick.max(t),
            regressed: regressed || r,
            fence: fence.max(f),
        },
        (
            ClaimReply::Paused {
                regressed,
                previous,
                fence,
            },
            ClaimReply::Paused {
                regressed: r,
                previous: p,
                fence: f,
            },
        ) => ClaimReply::Paused {
            regressed: regressed || r,
            previous: previous.max(p),
            fence: fence.max(f),
        },
        (
            ClaimReply::Busy {
                holder,
                regressed,
                previous,
                fence,
            },
            ClaimReply::Busy {
                regressed: r,
                previous: p,
                fence: f,
                ..
            },
        ) => ClaimReply::Busy {
            holder,
            regressed: regressed || r,
            previous: previous.max(p),
            fence: fence.max(f),
        },
        (ClaimReply::Early { ms }, ClaimReply::Early { ms: m }) => {
            ClaimReply::Early { ms: ms.max(m) }
        }
        (ClaimReply::Wait { ms }, ClaimReply::Wait { ms: m }) => ClaimReply::Wait { ms: ms.max(m) },
        (ClaimReply::Expired { late_ms }, ClaimReply::Expired { late_ms: l }) => {
            ClaimReply::Expired {
                late_ms: late_ms.max(l),
            }
        }
        (merged, _) => merged,
    }))
}
