//! The Redis side: key names, the Lua scripts, and typed requests and replies.
//!
//! Every change to a job's state is one atomic script (claim, renew, finish,
//! sweep): there is never a read-then-write across round trips, so a future
//! dropped half-way can never leave a half-done change. All keys of one job
//! share the hash tag `{job}`, so each script touches a single Redis Cluster
//! slot. This module knows nothing of processes or schedules; it turns
//! requests into script calls and replies into enums.

use std::sync::Arc;
use std::time::Duration;

use redis::{Script, Value};

use crate::config::{Overlap, RedisConfig};
use crate::link::{Conn, Link, LinkError};
use crate::outcome::{Outcome, Trigger};

const PRELUDE: &str = include_str!("lua/prelude.lua");

/// How long a finished run's done marker lives: a spooled outcome delivered
/// within this window is recognised as a duplicate.
pub const DONE_MARKER_TTL: Duration = Duration::from_secs(7 * 24 * 3600);

/// How far ahead of Redis time a tick may be and still be claimed. Zero: no
/// run ever starts before its tick by Redis time; a replica that wakes a
/// millisecond early pays one more round trip.
pub const EARLY_TOLERANCE_MS: i64 = 0;

/// The names of all keys cronlease writes under one prefix.
#[derive(Debug, Clone)]
pub struct Keys {
    prefix: String,
}

impl Keys {
    pub fn new(prefix: &str) -> Keys {
        Keys {
            prefix: prefix.to_string(),
        }
    }

    fn job_key(&self, job: &str, part: &str) -> String {
        format!("{}:{{{}}}:{}", self.prefix, job, part)
    }

    /// Hash: `last_tick`, `fence`, `paused`, last outcome summary.
    pub fn state(&self, job: &str) -> String {
        self.job_key(job, "state")
    }

    /// Hash: run id → JSON of the run in flight.
    pub fn running(&self, job: &str) -> String {
        self.job_key(job, "running")
    }

    /// String with PX: the run id of the holder (`…:lease:<run id>` with
    /// `overlap = "allow"`).
    pub fn lease(&self, job: &str) -> String {
        self.job_key(job, "lease")
    }

    /// Stream: one entry per outcome.
    pub fn runs(&self, job: &str) -> String {
        self.job_key(job, "runs")
    }

    /// String with PX: marks a run id whose outcome is recorded.
    pub fn done(&self, job: &str, run_id: &str) -> String {
        self.job_key(job, &format!("done:{run_id}"))
    }

    /// Hash: tick → fence of abandoned ticks waiting to be rerun
    /// (`on_holder_lost = "rerun"`).
    pub fn reruns(&self, job: &str) -> String {
        self.job_key(job, "reruns")
    }

    /// Hash: replica id → heartbeat JSON.
    pub fn replicas(&self) -> String {
        format!("{}:replicas", self.prefix)
    }

    /// String: a random id written once per Redis deployment; its loss or
    /// change means Redis lost state.
    pub fn epoch(&self) -> String {
        format!("{}:epoch", self.prefix)
    }

    /// Pub/sub channel on which every claim announces "<job> <tick>".
    pub fn claims_channel(&self) -> String {
        format!("{}:claimed", self.prefix)
    }

    /// Stream: manual run requests (`cronlease trigger`), read by the
    /// consumer group [`TRIGGER_GROUP`].
    pub fn triggers(&self) -> String {
        format!("{}:triggers", self.prefix)
    }

    /// The pseudo-job whose keys hold the lock NAME (`:` keeps it apart from
    /// every job name).
    pub fn lock_job(name: &str) -> String {
        format!("lock:{name}")
    }

    /// Pub/sub channel on which a lock's release is announced.
    pub fn lock_channel(&self, name: &str) -> String {
        format!("{}:{{lock:{name}}}:released", self.prefix)
    }
}

/// The consumer group of the replicas on the triggers stream.
pub const TRIGGER_GROUP: &str = "replicas";

struct Scripts {
    claim: Script,
    renew: Script,
    finish: Script,
    sweep: Script,
    manual: Script,
    lock_acquire: Script,
    lock_release: Script,
    pause: Script,
    missed: Script,
}

impl Scripts {
    fn new() -> Scripts {
        let script = |body: &str| Script::new(&format!("{PRELUDE}\n{body}"));
        Scripts {
            claim: script(include_str!("lua/claim.lua")),
            renew: script(include_str!("lua/renew.lua")),
            finish: script(include_str!("lua/finish.lua")),
            sweep: script(include_str!("lua/sweep.lua")),
            manual: script(include_str!("lua/manual.lua")),
            lock_acquire: script(include_str!("lua/lock_acquire.lua")),
            lock_release: script(include_str!("lua/lock_release.lua")),
            pause: Script::new(include_str!("lua/pause.lua")),
            missed: script(include_str!("lua/missed.lua")),
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
}

impl StoreError {
    /// True when the command may or may not have been executed (timeout,
    /// dropped connection): the caller must read back, not guess.
    pub fn is_ambiguous(&self) -> bool {
        match self {
            StoreError::Redis(e) => e.is_timeout() || e.is_connection_dropped() || e.is_io_error(),
            StoreError::Connect { .. } | StoreError::Link(_) | StoreError::Protocol { .. } => false,
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
        /// The high-water mark before this claim (-1: none); schedule ticks
        /// between it and this tick were missed.
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
    /// The deployment's epoch after this heartbeat.
    pub epoch: String,
    /// We created the epoch key (it was missing).
    pub created_epoch: bool,
    /// Redis time, when the heartbeat asked for it.
    pub server_ms: Option<i64>,
    /// Every replica's heartbeat JSON, ours included.
    pub replicas: Vec<(String, String)>,
}

/// A connection to Redis with the scripts and key names: cheap to clone,
/// every clone shares one multiplexed connection that reconnects by itself.
#[derive(Clone)]
pub struct Store {
    /// For connections of their own (blocking reads, pub/sub).
    link: Arc<Link>,
    command_timeout: Duration,
    conn: Conn,
    keys: Arc<Keys>,
    scripts: Arc<Scripts>,
    /// `(k, timeout)`: each claim is followed by `WAIT k timeout`.
    wait_replicas: Option<(u32, Duration)>,
}

impl Store {
    /// Connects (one attempt, bounded by `connect_timeout`).
    pub async fn connect(config: &RedisConfig) -> Result<Store, StoreError> {
        let link = Link::new(config)?;
        let url = config.describe();
        let conn = tokio::time::timeout(
            config.connect_timeout + config.command_timeout,
            link.connect(),
        )
        .await
        .map_err(|_| StoreError::Connect {
            url: url.clone(),
            source: redis::RedisError::from(std::io::Error::from(std::io::ErrorKind::TimedOut)),
        })?
        .map_err(|source| StoreError::Connect { url, source })?;
        Ok(Store {
            link: Arc::new(link),
            command_timeout: config.command_timeout,
            conn,
            keys: Arc::new(Keys::new(&config.key_prefix)),
            scripts: Arc::new(Scripts::new()),
            wait_replicas: (config.min_replicas_ack > 0)
                .then_some((config.min_replicas_ack, config.ack_timeout)),
        })
    }

    pub fn keys(&self) -> &Keys {
        &self.keys
    }

    /// Redis server time, ms since the epoch.
    pub async fn server_time_ms(&self) -> Result<i64, StoreError> {
        let mut conn = self.conn.clone();
        let (secs, micros): (i64, i64) = redis::cmd("TIME").query_async(&mut conn).await?;
        Ok(secs * 1000 + micros / 1000)
    }

    /// Reads the eviction and persistence settings.
    pub async fn server_settings(&self) -> Result<ServerSettings, StoreError> {
        let mut conn = self.conn.clone();
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
    /// in the same pipeline on the same connection.
    pub async fn claim(&self, request: &ClaimRequest<'_>) -> Result<ClaimReply, StoreError> {
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
            .query_with_script(&self.scripts.claim, build)
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
        script: &Script,
        build: impl Fn() -> redis::Pipeline,
    ) -> Result<Vec<Value>, StoreError> {
        let mut conn = self.conn.clone();
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
    pub async fn last_tick(&self, job: &str) -> Result<Option<i64>, StoreError> {
        let mut conn = self.conn.clone();
        let raw: Option<i64> = redis::cmd("HGET")
            .arg(self.keys.state(job))
            .arg("last_tick")
            .query_async(&mut conn)
            .await?;
        Ok(raw)
    }

    /// Renews every lease in `renewals` in one pipeline; `true` where the
    /// lease is still ours.
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
        let replies = self.query_with_script(&self.scripts.renew, build).await?;
        Ok(replies.iter().map(|r| as_int(r) == Some(1)).collect())
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
            .key(keys.done(job, &outcome.run_id))
            .key(keys.lease(job))
            .key(keys.reruns(job))
            .arg(&outcome.run_id)
            .arg(history)
            .arg(duration_ms(DONE_MARKER_TTL));
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
        let mut conn = self.conn.clone();
        let reply: Value = invocation.invoke_async(&mut conn).await?;
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

    /// Runs the sweep script for one job.
    pub async fn sweep(&self, request: &SweepRequest<'_>) -> Result<SweepReply, StoreError> {
        let keys = &self.keys;
        let mut conn = self.conn.clone();
        let reply: Value = self
            .scripts
            .sweep
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
            .arg(request.min_fence)
            .invoke_async(&mut conn)
            .await?;
        let items = as_array(reply, "sweep")?;
        let abandoned = items
            .first()
            .and_then(as_int)
            .ok_or_else(|| protocol("sweep", &Value::Nil))?;
        let rerun = parse_rerun(&items, 1, "sweep")?;
        Ok(SweepReply {
            abandoned: abandoned as u32,
            rerun,
        })
    }

    /// Writes this replica's heartbeat, reads the epoch (creating it if
    /// missing), every replica's heartbeat and, with `with_time`, the server
    /// time: one round trip (two when the epoch is missing).
    pub async fn heartbeat(
        &self,
        replica: &str,
        record: &str,
        new_epoch: &str,
        with_time: bool,
    ) -> Result<HeartbeatReply, StoreError> {
        let mut conn = self.conn.clone();
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
        if with_time {
            pipe.cmd("TIME");
        }
        let mut replies: Vec<Value> = pipe.query_async(&mut conn).await?;
        let time = if with_time { replies.pop() } else { None };
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
            epoch,
            created_epoch,
            server_ms,
            replicas,
        })
    }

    /// Removes this replica's heartbeat (clean shutdown).
    pub async fn remove_replica(&self, replica: &str) -> Result<(), StoreError> {
        let mut conn = self.conn.clone();
        let _: i64 = redis::cmd("HDEL")
            .arg(self.keys.replicas())
            .arg(replica)
            .query_async(&mut conn)
            .await?;
        Ok(())
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

/// A manual run request as read from the triggers stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TriggerRequest {
    /// The stream entry id; its first part is the request's Redis time.
    pub id: String,
    pub job: String,
    pub run_id: String,
    pub requested_by: String,
}

impl TriggerRequest {
    /// Redis time of the request, ms (from the entry id).
    pub fn requested_ms(&self) -> i64 {
        self.id
            .split('-')
            .next()
            .and_then(|ms| ms.parse().ok())
            .unwrap_or(0)
    }
}

/// Everything the manual-run script needs.
#[derive(Debug, Clone)]
pub struct ManualRequest<'a> {
    pub request: &'a TriggerRequest,
    pub lease: Duration,
    pub overlap: Overlap,
    pub replica: &'a str,
    pub host: &'a str,
    pub history: u32,
    pub min_fence: u64,
}

/// What the manual-run script did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ManualReply {
    Claimed {
        fence: u64,
        started_ms: i64,
        lease_key: String,
    },
    /// A run is in flight and `overlap = "skip"`: recorded as skipped.
    Busy { holder: String },
    /// This request was handled before.
    Duplicate,
}

/// What the lock script did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LockReply {
    Acquired { fence: u64, lease_key: String },
    Held { holder: String, ttl_ms: i64 },
}

/// A connection of its own for blocking reads of the triggers stream.
pub struct TriggerReader {
    conn: Conn,
    keys: Arc<Keys>,
    consumer: String,
}

impl TriggerReader {
    /// Waits up to `block` for new requests for this consumer.
    pub async fn read(&mut self, block: Duration) -> Result<Vec<TriggerRequest>, StoreError> {
        let reply: Value = redis::cmd("XREADGROUP")
            .arg("GROUP")
            .arg(TRIGGER_GROUP)
            .arg(&self.consumer)
            .arg("COUNT")
            .arg(100)
            .arg("BLOCK")
            .arg(duration_ms(block))
            .arg("STREAMS")
            .arg(self.keys.triggers())
            .arg(">")
            .query_async(&mut self.conn)
            .await?;
        // [[stream, [[id, [field, value, …]], …]]] or nil
        let Value::Array(streams) = reply else {
            return Ok(Vec::new());
        };
        let mut requests = Vec::new();
        for stream in streams {
            let Value::Array(mut parts) = stream else {
                continue;
            };
            if parts.len() == 2
                && let Value::Array(entries) = parts.remove(1)
            {
                requests.extend(entries.into_iter().filter_map(parse_trigger_entry));
            }
        }
        Ok(requests)
    }
}

fn parse_trigger_entry(entry: Value) -> Option<TriggerRequest> {
    let Value::Array(mut parts) = entry else {
        return None;
    };
    if parts.len() != 2 {
        return None;
    }
    let fields = match parts.remove(1) {
        Value::Array(fields) => fields,
        _ => Vec::new(),
    };
    let id = as_string(&parts[0])?;
    let mut job = String::new();
    let mut run_id = String::new();
    let mut requested_by = String::new();
    for pair in fields.chunks(2) {
        let (Some(name), Some(value)) = (
            pair.first().and_then(as_string),
            pair.get(1).and_then(as_string),
        ) else {
            continue;
        };
        match name.as_str() {
            "job" => job = value,
            "run_id" => run_id = value,
            "requested_by" => requested_by = value,
            _ => {}
        }
    }
    Some(TriggerRequest {
        id,
        job,
        run_id,
        requested_by,
    })
}

impl Store {
    /// Creates the replicas' consumer group on the triggers stream (and the
    /// stream) if missing.
    pub async fn ensure_trigger_group(&self) -> Result<(), StoreError> {
        let mut conn = self.conn.clone();
        let result: Result<(), redis::RedisError> = redis::cmd("XGROUP")
            .arg("CREATE")
            .arg(self.keys.triggers())
            .arg(TRIGGER_GROUP)
            .arg("$")
            .arg("MKSTREAM")
            .query_async(&mut conn)
            .await;
        match result {
            Err(e) if e.code() == Some("BUSYGROUP") => Ok(()),
            other => Ok(other?),
        }
    }

    /// A reader of the triggers stream as consumer `consumer`, on a
    /// connection of its own (its reads block).
    pub async fn trigger_reader(
        &self,
        consumer: &str,
        block: Duration,
    ) -> Result<TriggerReader, StoreError> {
        let conn = self.link.dedicated(block + self.command_timeout).await?;
        Ok(TriggerReader {
            conn,
            keys: self.keys.clone(),
            consumer: consumer.to_string(),
        })
    }

    /// Takes over requests another consumer read but did not acknowledge
    /// within `min_idle` (it died).
    pub async fn claim_stale_triggers(
        &self,
        consumer: &str,
        min_idle: Duration,
    ) -> Result<Vec<TriggerRequest>, StoreError> {
        let mut conn = self.conn.clone();
        let reply: Value = redis::cmd("XAUTOCLAIM")
            .arg(self.keys.triggers())
            .arg(TRIGGER_GROUP)
            .arg(consumer)
            .arg(duration_ms(min_idle))
            .arg("0-0")
            .arg("COUNT")
            .arg(100)
            .query_async(&mut conn)
            .await?;
        let Value::Array(mut parts) = reply else {
            return Err(protocol("XAUTOCLAIM", &reply));
        };
        if parts.len() < 2 {
            return Ok(Vec::new());
        }
        let Value::Array(entries) = parts.remove(1) else {
            return Ok(Vec::new());
        };
        Ok(entries
            .into_iter()
            .filter_map(parse_trigger_entry)
            .collect())
    }

    /// Acknowledges a handled request.
    pub async fn ack_trigger(&self, id: &str) -> Result<(), StoreError> {
        let mut conn = self.conn.clone();
        let _: i64 = redis::cmd("XACK")
            .arg(self.keys.triggers())
            .arg(TRIGGER_GROUP)
            .arg(id)
            .query_async(&mut conn)
            .await?;
        Ok(())
    }

    /// Queues a manual run request; returns its stream id.
    pub async fn enqueue_trigger(
        &self,
        job: &str,
        run_id: &str,
        requested_by: &str,
    ) -> Result<String, StoreError> {
        let mut conn = self.conn.clone();
        let id: String = redis::cmd("XADD")
            .arg(self.keys.triggers())
            .arg("MAXLEN")
            .arg("~")
            .arg(10_000)
            .arg("*")
            .arg("job")
            .arg(job)
            .arg("run_id")
            .arg(run_id)
            .arg("requested_by")
            .arg(requested_by)
            .query_async(&mut conn)
            .await?;
        Ok(id)
    }

    /// Runs the manual-run script for a request.
    pub async fn manual_claim(
        &self,
        manual: &ManualRequest<'_>,
    ) -> Result<ManualReply, StoreError> {
        let request = manual.request;
        let keys = &self.keys;
        let job = request.job.as_str();
        let mut conn = self.conn.clone();
        let reply: Value = self
            .scripts
            .manual
            .key(keys.state(job))
            .key(keys.running(job))
            .key(keys.lease(job))
            .key(keys.runs(job))
            .key(keys.done(job, &request.run_id))
            .arg(request.requested_ms())
            .arg(&request.run_id)
            .arg(duration_ms(manual.lease))
            .arg(manual.overlap.as_str())
            .arg(manual.replica)
            .arg(manual.host)
            .arg(manual.history)
            .arg(manual.min_fence)
            .arg(duration_ms(DONE_MARKER_TTL))
            .invoke_async(&mut conn)
            .await?;
        let items = as_array(reply, "manual")?;
        let bad = || protocol("manual", &Value::Array(items.clone()));
        match items.first().and_then(as_string).as_deref() {
            Some("claimed") => Ok(ManualReply::Claimed {
                fence: items.get(1).and_then(as_int).ok_or_else(bad)? as u64,
                started_ms: items.get(2).and_then(as_int).ok_or_else(bad)?,
                lease_key: items.get(3).and_then(as_string).ok_or_else(bad)?,
            }),
            Some("busy") => Ok(ManualReply::Busy {
                holder: items.get(1).and_then(as_string).unwrap_or_default(),
            }),
            Some("duplicate") => Ok(ManualReply::Duplicate),
            _ => Err(bad()),
        }
    }

    /// The stream id of a run's recorded outcome, once there is one.
    pub async fn done_marker(&self, job: &str, run_id: &str) -> Result<Option<String>, StoreError> {
        let mut conn = self.conn.clone();
        Ok(redis::cmd("GET")
            .arg(self.keys.done(job, run_id))
            .query_async(&mut conn)
            .await?)
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
        let mut conn = self.conn.clone();
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
        Ok(invocation.invoke_async(&mut conn).await?)
    }

    /// Pauses or resumes a job; returns the Redis time it happened.
    pub async fn set_paused(&self, job: &str, paused: bool, who: &str) -> Result<i64, StoreError> {
        let mut conn = self.conn.clone();
        Ok(self
            .scripts
            .pause
            .key(self.keys.state(job))
            .arg(if paused { "1" } else { "0" })
            .arg(who)
            .invoke_async(&mut conn)
            .await?)
    }

    /// A hash as field → value (state, running, replicas).
    pub async fn hash(&self, key: &str) -> Result<Vec<(String, String)>, StoreError> {
        let mut conn = self.conn.clone();
        Ok(redis::cmd("HGETALL")
            .arg(key)
            .query_async(&mut conn)
            .await?)
    }

    /// The newest `count` entries of a job's outcome stream, newest first.
    pub async fn history(
        &self,
        job: &str,
        count: usize,
    ) -> Result<Vec<(String, Vec<(String, String)>)>, StoreError> {
        let mut conn = self.conn.clone();
        Ok(redis::cmd("XREVRANGE")
            .arg(self.keys.runs(job))
            .arg("+")
            .arg("-")
            .arg("COUNT")
            .arg(count)
            .query_async(&mut conn)
            .await?)
    }

    /// One entry of a job's outcome stream.
    pub async fn outcome_entry(
        &self,
        job: &str,
        id: &str,
    ) -> Result<Option<Vec<(String, String)>>, StoreError> {
        let mut conn = self.conn.clone();
        let entries: Vec<(String, Vec<(String, String)>)> = redis::cmd("XRANGE")
            .arg(self.keys.runs(job))
            .arg(id)
            .arg(id)
            .query_async(&mut conn)
            .await?;
        Ok(entries.into_iter().next().map(|(_, fields)| fields))
    }

    /// Whether any key of the job exists (for "unknown job" without a config).
    pub async fn job_exists(&self, job: &str) -> Result<bool, StoreError> {
        let mut conn = self.conn.clone();
        let n: i64 = redis::cmd("EXISTS")
            .arg(self.keys.state(job))
            .arg(self.keys.runs(job))
            .query_async(&mut conn)
            .await?;
        Ok(n > 0)
    }

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
        let mut conn = self.conn.clone();
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
        let mut conn = self.conn.clone();
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

    /// A pub/sub connection subscribed to the claims channel.
    pub async fn claims_subscriber(&self) -> Result<redis::aio::PubSub, StoreError> {
        let mut pubsub = self.link.pubsub().await?;
        pubsub.subscribe(self.keys.claims_channel()).await?;
        Ok(pubsub)
    }

    /// A pub/sub connection subscribed to lock `name`'s release channel.
    pub async fn lock_waiter(&self, name: &str) -> Result<redis::aio::PubSub, StoreError> {
        let mut pubsub = self.link.pubsub().await?;
        pubsub.subscribe(self.keys.lock_channel(name)).await?;
        Ok(pubsub)
    }
}

fn duration_ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
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
