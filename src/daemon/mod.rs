//! The replica: schedules every job, claims its ticks, runs what it wins,
//! records outcomes, and shuts down cleanly.
//!
//! [`run`] is the whole life of a replica. It connects to Redis (waiting as
//! long as it takes: the daemon never exits because Redis is away), checks
//! that Redis cannot evict our keys, then starts its tasks, all owned by one
//! [`TaskTracker`] and stopped through [`CancellationToken`]s:
//!
//! - one **job loop** per job: sleeps until the next tick by Redis time,
//!   claims it, starts the run if it won; on start and after Redis was away,
//!   catches up missed ticks per the job's misfire policy;
//! - the **watchdog** ([`crate::watchdog`]): renews leases, stops runs whose
//!   lease is lost;
//! - the **heartbeat**: announces the replica, measures the Redis clock
//!   offset, detects state loss (the epoch key) and dead replicas (whose runs
//!   it sweeps);
//! - the **spool courier**: delivers outcomes that could not reach Redis;
//! - the **trigger consumer**: runs manual requests (`cronlease trigger`)
//!   from the triggers stream, as one consumer of the replicas' group, and
//!   takes over requests whose consumer died (`XAUTOCLAIM`).
//!
//! The files: this one holds the replica's life, the job loop, claims and
//! runs; `heartbeat`, `courier` (the spool), `triggers` and `rendezvous`
//! (ranking and the announcement listener) each hold one background task;
//! `state` the small shared state, one owner each.
//!
//! Runs are tasks of their own (in `Ctx::runs`), so a job loop never waits
//! for a run (except for `misfire = "run_all"` catch-up, which runs missed
//! ticks one after another).
//!
//! Shutdown (the `shutdown` token): job loops stop claiming; runs get
//! `shutdown_grace` to finish, then are interrupted (SIGTERM, `kill_grace`,
//! SIGKILL); their outcomes are written (or spooled); the replica removes its
//! heartbeat and returns.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use chrono::{DateTime, SecondsFormat, Utc};
use futures_util::FutureExt;
use tokio::sync::{Notify, mpsc, oneshot, watch};
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep, sleep_until};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, error, info, warn};
use uuid::Uuid;

use crate::clock::{RedisClock, local_now_ms};
use crate::config::{Config, Job, Misfire, OnHolderLost, Overlap};
use crate::membership::Heartbeat;
use crate::outcome::{Outcome, Status, Trigger};
use crate::runner::{self, RunSpec, Stop};
use crate::spool::{Spool, SpoolError};
use crate::store::{
    ClaimReply, ClaimRequest, FinishReply, ManualReply, ManualRequest, REPLICA_FORGET_AFTER,
    Recorded, Rerun, RerunOffer, ServerSettings, ServerTime, Store, StoreError, SweepRequest,
    TriggerReader, TriggerRequest,
};
use crate::telemetry;
use crate::watchdog::{self, LeaseHold};
use state::{Announcements, LiveReplicas, MarkBook};

mod courier;
mod heartbeat;
mod rendezvous;
mod state;
mod triggers;

use courier::{count_spooled, spool_courier};
use heartbeat::heartbeat_loop;
use rendezvous::{MAX_RANK_WAIT, RANK_STEP, claims_listener, rendezvous_score};
use triggers::trigger_consumer;

/// A tick claimed no later than this after its time is on time; older
/// unclaimed ticks are missed and go to the misfire policy.
const LATE_MS: i64 = 1_000;

/// At most this many missed ticks are caught up by `misfire = "run_all"`
/// (the most recent ones).
pub const MAX_CATCH_UP: usize = 100;

/// Why a replica could not run.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error(
        "Redis {node} is configured to evict keys (maxmemory {maxmemory} bytes, maxmemory-policy {policy}): \
         a lease or a tick's high-water mark could vanish and a tick could run twice. \
         Set `maxmemory-policy noeviction` (CONFIG SET maxmemory-policy noeviction, and in redis.conf), \
         or `maxmemory 0`"
    )]
    Eviction {
        node: String,
        maxmemory: u64,
        policy: String,
    },
    #[error("cannot use the state directory: {0}")]
    Spool(#[from] SpoolError),
}

/// Who this replica is, as it appears in Redis.
#[derive(Debug, Clone)]
pub struct Identity {
    pub replica: String,
    pub host: String,
    pub pid: u32,
}

impl Identity {
    /// The configured replica id, or `<hostname>-<pid>-<4 hex>`.
    pub fn new(configured: Option<&str>) -> Identity {
        let host = nix::unistd::gethostname()
            .ok()
            .and_then(|h| h.into_string().ok())
            .unwrap_or_else(|| "unknown-host".to_string());
        let pid = std::process::id();
        let replica = match configured {
            Some(id) => id.to_string(),
            None => {
                let random = Uuid::new_v4().simple().to_string();
                format!("{host}-{pid}-{}", &random[..4])
            }
        };
        Identity { replica, host, pid }
    }
}

/// What every task of a replica shares. Its mutable state has one owner per
/// piece (`state`: marks, live replicas, announcements), each behind its own
/// `std` mutex that is never held across an `.await`.
struct Ctx {
    /// The config the replica started with: its `[redis]` and `[daemon]`
    /// settings hold until restart.
    config: Arc<Config>,
    /// The current job table (replaced by a reload).
    jobs: watch::Sender<Arc<JobTable>>,
    store: Store,
    clock: RedisClock,
    identity: Identity,
    started_ms: i64,
    spool: Spool,
    watchdog: watchdog::Handle,
    /// Every run task; shutdown waits for it.
    runs: TaskTracker,
    /// Cancelled when shutdown begins: no new run starts after that, not
    /// even a rerun handed over by a finish or a sweep.
    claiming: CancellationToken,
    /// Per job, the highest tick and fence seen (see [`state::MarkBook`]).
    marks: MarkBook,
    /// Whether Redis answered last time anyone asked; logs on change only.
    redis_up: watch::Sender<bool>,
    /// Wakes the spool courier when an outcome was spooled or Redis is back.
    spooled: Notify,
    /// Wakes the heartbeat after a claim, so the runs it lists are fresh if
    /// this replica dies soon after (others sweep what it lists).
    heartbeat_now: Notify,
    /// State-loss events detected (epoch changed, high-water mark behind).
    state_loss_events: AtomicU64,
    /// The candidates of the rendezvous ranking.
    live: LiveReplicas,
    /// Claims other replicas announced.
    announced: Announcements,
}

impl Ctx {
    /// This replica's place in the rendezvous order of `job`'s `tick` among
    /// the live replicas: 0 claims at once, the others wait their turn.
    fn rank(&self, job: &str, tick_ms: i64) -> usize {
        let live = self.live.snapshot();
        let own = rendezvous_score(&self.identity.replica, job, tick_ms);
        live.iter()
            .filter(|id| **id != self.identity.replica)
            .filter(|id| rendezvous_score(id, job, tick_ms) > own)
            .count()
    }

    fn redis_answered(&self) {
        if !*self.redis_up.borrow() {
            info!("Redis is reachable again");
            self.redis_up.send_replace(true);
            self.spooled.notify_one();
        }
    }

    fn redis_failed(&self, error: &StoreError) {
        metrics::counter!(telemetry::REDIS_ERRORS).increment(1);
        if *self.redis_up.borrow() {
            error!(error = %error, "Redis is unreachable; claiming nothing until it is back");
            self.redis_up.send_replace(false);
        }
    }

    fn state_loss(&self, job: Option<&str>, detail: &str) {
        let n = self.state_loss_events.fetch_add(1, Ordering::Relaxed) + 1;
        metrics::counter!(telemetry::STATE_LOSS).increment(1);
        error!(
            job = job.unwrap_or("-"),
            events = n,
            "REDIS STATE LOSS DETECTED: {detail}. Ticks and fences this replica remembers are enforced; \
             ticks only another replica saw may run again (see README, guarantees)"
        );
    }
}

/// Runs a replica until `shutdown` is cancelled and every run is done.
pub async fn run(
    config: Config,
    shutdown: CancellationToken,
    mut reload: mpsc::UnboundedReceiver<()>,
) -> Result<(), DaemonError> {
    let config = Arc::new(config);
    let identity = Identity::new(config.daemon.replica_id.as_deref());
    let spool = Spool::open(&config.daemon.state_dir)?;
    info!(
        replica = %identity.replica, host = %identity.host, jobs = config.jobs.len(),
        redis = %config.redis.describe(), "starting"
    );
    if config.redis.tls.insecure_skip_verify {
        warn!(
            "TLS CERTIFICATE VERIFICATION IS OFF (insecure_skip_verify = true): anyone on the network path can pose as Redis, read the job table's traffic and forge claims; set ca_file instead"
        );
    }

    let Some(store) = connect(&config, &shutdown).await else {
        return Ok(());
    };
    check_server_settings(&store).await?;

    let service = CancellationToken::new();
    let claiming = shutdown.child_token();
    let (watchdog, watchdog_task) =
        watchdog::new(store.clone(), config.daemon.lease, service.clone());
    let identity_replica = identity.replica.clone();
    let ctx = Arc::new(Ctx {
        jobs: watch::Sender::new(job_table(&config)),
        config: config.clone(),
        store,
        clock: RedisClock::new(),
        identity,
        started_ms: local_now_ms(),
        spool,
        watchdog,
        runs: TaskTracker::new(),
        claiming: claiming.clone(),
        marks: MarkBook::load(config.daemon.state_dir.join("marks.json")),
        redis_up: watch::Sender::new(true),
        spooled: Notify::new(),
        heartbeat_now: Notify::new(),
        state_loss_events: AtomicU64::new(0),
        live: LiveReplicas::new(&identity_replica),
        announced: Announcements::default(),
    });
    measure_clock(&ctx).await;

    let background = TaskTracker::new();
    let health = Arc::new(telemetry::Health::new(
        SUPERVISOR_PERIOD,
        ctx.redis_up.subscribe(),
    ));
    health.beat();
    if let Some(addr) = config.daemon.metrics_listen {
        start_metrics(addr, health.clone(), &background, &service).await;
    }
    background.spawn(watchdog_task);
    background.spawn(heartbeat_loop(ctx.clone(), service.clone()));
    background.spawn(spool_courier(ctx.clone(), service.clone()));
    background.spawn(marks_keeper(ctx.clone(), service.clone()));
    background.spawn(claims_listener(ctx.clone(), service.clone()));
    // Manual runs need one stream all replicas read: not with `quorum`
    // (`cronlease trigger` says so).
    if !ctx.store.is_quorum() {
        background.spawn(trigger_consumer(ctx.clone(), claiming.clone()));
    }
    let mut scheduler = Scheduler {
        loops: HashMap::new(),
        tracker: TaskTracker::new(),
        claiming: claiming.clone(),
    };
    scheduler.apply(&ctx, &ctx.jobs.borrow().clone());
    notify(&[sd_notify::NotifyState::Ready], &ctx);
    info!(replica = %ctx.identity.replica, "ready");

    // The supervisor: reloads, and tells systemd it is alive. It runs on the
    // same runtime as every job loop, so a wedged runtime stops the pings.
    let watchdog_period = sd_notify::watchdog_enabled().map(|usec| usec / 2);
    let mut beat = tokio::time::interval(SUPERVISOR_PERIOD);
    let mut last_ping = Instant::now();
    loop {
        tokio::select! {
            () = shutdown.cancelled() => break,
            Some(()) = reload.recv() => reload_jobs(&ctx, &mut scheduler).await,
            _ = beat.tick() => {
                health.beat();
                if let Some(period) = watchdog_period
                    && last_ping.elapsed() >= period.min(SUPERVISOR_PERIOD * 5)
                {
                    last_ping = Instant::now();
                    notify(&[sd_notify::NotifyState::Watchdog], &ctx);
                }
            }
        }
    }
    let _ = sd_notify::notify(&[sd_notify::NotifyState::Stopping]);
    info!("shutting down: no more claims; waiting for runs in flight");
    scheduler.tracker.close();
    scheduler.tracker.wait().await;
    drain_runs(&ctx).await;
    service.cancel();
    background.close();
    background.wait().await;
    if let Err(e) = ctx.store.remove_replica(&ctx.identity.replica).await {
        warn!(error = %e, "cannot remove this replica's heartbeat");
    }
    info!("stopped");
    Ok(())
}

/// Writes changed marks to disk every second, and once more at the end.
async fn marks_keeper(ctx: Arc<Ctx>, cancel: CancellationToken) {
    loop {
        tokio::select! {
            () = cancel.cancelled() => break,
            () = sleep(Duration::from_secs(1)) => {}
        }
        let ctx2 = ctx.clone();
        let _ = tokio::task::spawn_blocking(move || ctx2.marks.save()).await;
    }
    let _ = tokio::task::spawn_blocking(move || ctx.marks.save()).await;
}

/// How often the supervisor loop turns (health beat, systemd pings).
const SUPERVISOR_PERIOD: Duration = Duration::from_secs(1);

/// Installs the metrics recorder and serves `/metrics` and `/healthz`. A
/// port that cannot be bound is logged, not fatal: claims matter more.
async fn start_metrics(
    addr: std::net::SocketAddr,
    health: Arc<telemetry::Health>,
    tasks: &TaskTracker,
    cancel: &CancellationToken,
) {
    let handle = match telemetry::install() {
        Ok(handle) => handle,
        Err(e) => {
            error!(error = %e, "metrics are off");
            return;
        }
    };
    match telemetry::bind(addr).await {
        Ok(listener) => {
            let bound = listener
                .local_addr()
                .map_or_else(|_| addr.to_string(), |a| a.to_string());
            info!(addr = %bound, "metrics listening on http://{bound}/metrics");
            tasks.spawn(telemetry::serve(listener, handle, health, cancel.clone()));
        }
        Err(e) => error!(error = %e, "metrics and /healthz are not served"),
    }
}

/// The jobs by name, shared with the tasks that look jobs up.
type JobTable = BTreeMap<String, Arc<Job>>;

fn job_table(config: &Config) -> Arc<JobTable> {
    Arc::new(
        config
            .jobs
            .iter()
            .map(|(name, job)| (name.clone(), Arc::new(job.clone())))
            .collect(),
    )
}

/// Sends `states` plus a one-line STATUS to systemd (a no-op outside it).
fn notify(states: &[sd_notify::NotifyState<'_>], ctx: &Ctx) {
    let status = format!(
        "{} jobs, {} runs in flight, Redis {}",
        ctx.jobs.borrow().len(),
        ctx.runs.len(),
        if *ctx.redis_up.borrow() {
            "up"
        } else {
            "unreachable"
        }
    );
    let mut all = states.to_vec();
    all.push(sd_notify::NotifyState::Status(&status));
    let _ = sd_notify::notify(&all);
}

/// The job loops, one per job, and what each was started with.
struct Scheduler {
    loops: HashMap<String, (Arc<Job>, CancellationToken)>,
    tracker: TaskTracker,
    claiming: CancellationToken,
}

impl Scheduler {
    /// Starts, stops and restarts job loops so they match `table`. Runs in
    /// flight are not touched: they own their job definition.
    fn apply(
        &mut self,
        ctx: &Arc<Ctx>,
        table: &JobTable,
    ) -> (Vec<String>, Vec<String>, Vec<String>) {
        let (mut added, mut removed, mut changed) = (Vec::new(), Vec::new(), Vec::new());
        self.loops
            .retain(|name, (job, token)| match table.get(name) {
                None => {
                    token.cancel();
                    removed.push(name.clone());
                    false
                }
                Some(new) if new.definition_hash() != job.definition_hash() => {
                    token.cancel();
                    changed.push(name.clone());
                    false
                }
                Some(_) => true,
            });
        for (name, job) in table {
            if self.loops.contains_key(name) {
                continue;
            }
            if !changed.contains(name) {
                added.push(name.clone());
            }
            let token = self.claiming.child_token();
            self.tracker
                .spawn(job_loop(ctx.clone(), job.clone(), token.clone()));
            self.loops.insert(name.clone(), (job.clone(), token));
        }
        (added, removed, changed)
    }
}

/// SIGHUP: re-reads the config file; a valid one replaces the job table, an
/// invalid one is logged and the old table kept.
async fn reload_jobs(ctx: &Arc<Ctx>, scheduler: &mut Scheduler) {
    let _ = sd_notify::notify(&[
        sd_notify::NotifyState::Reloading,
        sd_notify::NotifyState::monotonic_usec_now()
            .unwrap_or(sd_notify::NotifyState::Status("reloading")),
    ]);
    let path = ctx.config.source.clone();
    info!(config = %path.display(), "SIGHUP: reloading the job table");
    match tokio::task::spawn_blocking(move || Config::load(&path)).await {
        Ok(Ok(new)) => {
            for warning in new.warnings(to_datetime(ctx.clock.now_ms())) {
                warn!("{warning}");
            }
            if new.redis != ctx.config.redis || new.daemon != ctx.config.daemon {
                warn!(
                    "changes to [redis] or [daemon] take effect at the next restart; jobs are reloaded now"
                );
            }
            let table = job_table(&new);
            let (added, removed, changed) = scheduler.apply(ctx, &table);
            ctx.jobs.send_replace(table);
            ctx.heartbeat_now.notify_one();
            info!(?added, ?removed, ?changed, "job table reloaded");
        }
        Ok(Err(e)) => error!("reload rejected, keeping the old job table: {e}"),
        Err(e) => error!(error = %e, "reload failed; keeping the old job table"),
    }
    notify(&[sd_notify::NotifyState::Ready], ctx);
}

/// Connects, retrying with backoff until it works or `shutdown`.
async fn connect(config: &Config, shutdown: &CancellationToken) -> Option<Store> {
    let mut backoff = Duration::from_millis(200);
    loop {
        match Store::connect(&config.redis).await {
            Ok(store) => match store.server_time_ms().await {
                Ok(_) => return Some(store),
                Err(e) => warn!(error = %e, "Redis does not answer yet; retrying"),
            },
            Err(e) => warn!(error = %e, "cannot connect to Redis yet; retrying"),
        }
        tokio::select! {
            () = shutdown.cancelled() => return None,
            () = sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(Duration::from_secs(5));
    }
}

async fn check_server_settings(store: &Store) -> Result<(), DaemonError> {
    for (node, settings) in store.server_settings().await {
        check_node_settings(&node, settings)?;
    }
    Ok(())
}

fn check_node_settings(
    node: &str,
    settings: Result<ServerSettings, StoreError>,
) -> Result<(), DaemonError> {
    match settings {
        Ok(ServerSettings::Known {
            maxmemory,
            policy,
            appendonly,
            save,
        }) => {
            if maxmemory > 0 && policy != "noeviction" {
                return Err(DaemonError::Eviction {
                    node: node.to_string(),
                    maxmemory,
                    policy,
                });
            }
            if !appendonly && save.trim().is_empty() {
                warn!(
                    redis = %node,
                    "Redis persistence is off (appendonly no, no save points): a Redis restart loses every \
                     tick's high-water mark and a tick may run twice; set `appendonly yes` and \
                     `appendfsync everysec`"
                );
            } else if !appendonly {
                warn!(
                    redis = %node,
                    "Redis uses RDB snapshots only: a crash loses the claims since the last snapshot; prefer `appendonly yes`"
                );
            }
        }
        Ok(ServerSettings::Unknown(reason)) => warn!(
            redis = %node,
            reason = %reason,
            "cannot read Redis settings (CONFIG GET not allowed); make sure maxmemory-policy is noeviction and persistence is on"
        ),
        Err(e) => warn!(redis = %node, error = %e, "cannot read Redis settings; going on"),
    }
    Ok(())
}

async fn measure_clock(ctx: &Ctx) {
    let sent = local_now_ms();
    match ctx.store.server_time_ms().await {
        Ok(server) => {
            ctx.clock.observe(server, sent, local_now_ms());
            info!(
                offset_ms = ctx.clock.offset_ms(),
                "Redis clock offset measured"
            );
        }
        Err(e) => warn!(error = %e, "cannot read the Redis clock; assuming it matches ours"),
    }
}

/// Waits for runs in flight: `shutdown_grace`, then interrupts them and
/// waits for their outcomes to be written.
async fn drain_runs(ctx: &Ctx) {
    ctx.runs.close();
    let daemon = &ctx.config.daemon;
    if tokio::time::timeout(daemon.shutdown_grace, ctx.runs.wait())
        .await
        .is_ok()
    {
        return;
    }
    warn!(runs = ctx.runs.len(), grace = ?daemon.shutdown_grace, "runs still going after the shutdown grace; interrupting them");
    ctx.watchdog
        .send(watchdog::Command::StopAll(Stop::Shutdown));
    let bound = daemon.kill_grace + ctx.config.redis.command_timeout * 4 + Duration::from_secs(5);
    if tokio::time::timeout(bound, ctx.runs.wait()).await.is_err() {
        error!(
            runs = ctx.runs.len(),
            "runs did not end after SIGKILL; exiting anyway"
        );
    }
}

fn to_datetime(ms: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(ms).unwrap_or_default()
}

fn rfc3339(ms: i64) -> String {
    to_datetime(ms).to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// How one attempt to claim a tick ended.
enum ClaimEnd {
    /// Redis answered: the tick is ours (the run is started) or not.
    Answered(Option<JoinHandle<()>>),
    /// The tick was not claimed in time (Redis was unreachable, or answered
    /// only after the deadline): the misfire policy decides.
    Late,
    Cancelled,
}

/// Sleeps, unless cancelled; false when cancelled.
async fn pause(duration: Duration, cancel: &CancellationToken) -> bool {
    tokio::select! {
        () = cancel.cancelled() => false,
        () = sleep(duration) => true,
    }
}

async fn job_loop(ctx: Arc<Ctx>, job: Arc<Job>, cancel: CancellationToken) {
    // The last tick this loop is done with; None: catch up first.
    let mut cursor: Option<i64> = None;
    loop {
        let after = match cursor {
            Some(after) => after,
            None => match catch_up(&ctx, &job, &cancel).await {
                Some(after) => after,
                None => return,
            },
        };
        let Some(tick) = job.schedule.next_after(to_datetime(after)) else {
            info!(job = %job.name, "the schedule has no more ticks");
            cancel.cancelled().await;
            return;
        };
        let tick_ms = tick.timestamp_millis();
        tokio::select! {
            () = cancel.cancelled() => return,
            () = sleep_until(ctx.clock.instant_at(tick_ms)) => {}
        }
        if ctx.clock.now_ms() - tick_ms > LATE_MS {
            // This replica was stalled (a pause, a long catch-up): the tick is
            // missed, and the misfire policy decides.
            cursor = None;
            continue;
        }
        // Rendezvous: the preferred replica claims at once; the others wait
        // their turn and claim only if no claim was announced meanwhile, so
        // Redis sees about one claim per tick however many replicas run.
        let rank = ctx.rank(&job.name, tick_ms);
        if rank > 0 {
            let turn = RANK_STEP * u32::try_from(rank.min(MAX_RANK_WAIT)).unwrap_or(1);
            if !pause(turn, &cancel).await {
                return;
            }
            if ctx.announced.covers(&job.name, tick_ms) {
                count_claim(&job, "announced");
                ctx.marks.note(&job.name, Some(tick_ms), None);
                cursor = Some(tick_ms);
                continue;
            }
        }
        match claim(&ctx, &job, tick_ms, Trigger::Schedule, &cancel).await {
            ClaimEnd::Answered(_) => cursor = Some(tick_ms),
            ClaimEnd::Late => cursor = None,
            ClaimEnd::Cancelled => return,
        }
    }
}

/// Handles ticks that passed while this replica could not claim them (it was
/// not running, or Redis was away), per the job's misfire policy. Returns
/// the instant up to which ticks are handled, or None when cancelled.
async fn catch_up(ctx: &Arc<Ctx>, job: &Arc<Job>, cancel: &CancellationToken) -> Option<i64> {
    let mut backoff = Duration::from_millis(100);
    let stored = loop {
        match ctx.store.last_tick(&job.name).await {
            Ok(stored) => break stored,
            Err(e) => {
                ctx.redis_failed(&e);
                debug!(job = %job.name, error = %e, "waiting for Redis to catch up");
                if !pause(backoff, cancel).await {
                    return None;
                }
                backoff = (backoff * 2).min(Duration::from_secs(2));
            }
        }
    };
    ctx.redis_answered();
    sweep(ctx, job).await;
    let now = ctx.clock.now_ms();
    let last = match (stored, ctx.marks.get(&job.name).last_tick) {
        (Some(a), Some(b)) => a.max(b),
        (a, b) => match a.or(b) {
            Some(last) => last,
            // Never claimed anywhere: nothing was missed.
            None => return Some(now),
        },
    };
    let grace_ms = i64::try_from(job.misfire_grace.as_millis()).unwrap_or(i64::MAX);
    let horizon = last.max(now.saturating_sub(grace_ms).saturating_sub(1));
    let mut missed: Vec<i64> = Vec::new();
    let mut on_time: Vec<i64> = Vec::new();
    let mut cursor = to_datetime(horizon);
    while let Some(tick) = job.schedule.next_after(cursor) {
        let tick_ms = tick.timestamp_millis();
        if tick_ms > now {
            break;
        }
        if now - tick_ms <= LATE_MS {
            on_time.push(tick_ms);
        } else {
            missed.push(tick_ms);
            if missed.len() > MAX_CATCH_UP {
                missed.remove(0);
            }
        }
        cursor = tick;
    }
    if !missed.is_empty() {
        info!(
            job = %job.name, missed = missed.len(), policy = %job.misfire,
            oldest = %rfc3339(missed[0]), latest = %rfc3339(missed[missed.len() - 1]),
            "ticks were missed"
        );
    }
    let to_claim: Vec<i64> = match job.misfire {
        Misfire::Skip => Vec::new(),
        Misfire::RunOnce => missed.last().copied().into_iter().collect(),
        Misfire::RunAll => missed,
    };
    for tick_ms in to_claim {
        match claim(ctx, job, tick_ms, Trigger::Misfire, cancel).await {
            // run_all runs missed ticks one after another.
            ClaimEnd::Answered(Some(run)) if job.misfire == Misfire::RunAll => {
                tokio::select! {
                    _ = run => {}
                    () = cancel.cancelled() => return None,
                }
            }
            ClaimEnd::Answered(_) | ClaimEnd::Late => {}
            ClaimEnd::Cancelled => return None,
        }
    }
    for tick_ms in on_time {
        if let ClaimEnd::Cancelled = claim(ctx, job, tick_ms, Trigger::Schedule, cancel).await {
            return None;
        }
    }
    Some(now)
}

/// Claims one tick, retrying while Redis is away, until Redis answers.
///
/// Every attempt carries the claim's deadline (by Redis time: `LATE_MS`
/// after the tick, `misfire_grace` for catch-up): an attempt that reaches
/// Redis after it takes no effect. So once an attempt may have been sent
/// (an ambiguous error), the loop does not give up on its own: only an
/// answer tells whether an earlier attempt won, and an answer after the
/// deadline is definite (`Expired`: nothing can win any more; `Claimed`:
/// an earlier attempt won and its lease still holds).
async fn claim(
    ctx: &Arc<Ctx>,
    job: &Arc<Job>,
    tick_ms: i64,
    trigger: Trigger,
    cancel: &CancellationToken,
) -> ClaimEnd {
    // One run id for every attempt: the claim script recognises a retry of
    // a claim that won but whose reply was lost.
    let run_id = Uuid::new_v4().to_string();
    let deadline_ms = match trigger {
        Trigger::Schedule => tick_ms + LATE_MS,
        Trigger::Misfire | Trigger::Rerun | Trigger::Manual => {
            tick_ms.saturating_add(i64::try_from(job.misfire_grace.as_millis()).unwrap_or(i64::MAX))
        }
    };
    let mut backoff = Duration::from_millis(50);
    // Whether some attempt may have reached Redis without our hearing back.
    let mut maybe_sent = false;
    let mut warned = false;
    loop {
        if cancel.is_cancelled() {
            return ClaimEnd::Cancelled;
        }
        let marks = ctx.marks.get(&job.name);
        let request = ClaimRequest {
            job: &job.name,
            tick_ms,
            run_id: &run_id,
            lease: ctx.config.daemon.lease,
            overlap: job.overlap,
            replica: &ctx.identity.replica,
            host: &ctx.identity.host,
            history: ctx.config.daemon.history,
            min_tick: marks.last_tick.unwrap_or(-1),
            min_fence: marks.fence,
            trigger,
            wait_if_busy: trigger == Trigger::Misfire && job.misfire == Misfire::RunAll,
            deadline_ms,
        };
        let sent = Instant::now();
        let reply = match ctx.store.claim(&request).await {
            Ok(reply) => reply,
            Err(e) => {
                count_claim(job, "error");
                // Quorum masters that answered but split between racing
                // replicas are not an outage.
                if !matches!(
                    e,
                    StoreError::NoQuorum {
                        reachable: true,
                        ..
                    }
                ) {
                    ctx.redis_failed(&e);
                }
                maybe_sent |= e.is_ambiguous();
                if ctx.clock.now_ms() > deadline_ms {
                    if !maybe_sent {
                        warn!(job = %job.name, tick = %rfc3339(tick_ms), %run_id, error = %e, "tick not claimed: Redis unreachable");
                        return ClaimEnd::Late;
                    }
                    if !warned {
                        warned = true;
                        warn!(job = %job.name, tick = %rfc3339(tick_ms), %run_id, error = %e, "claim deadline passed with an attempt unanswered; waiting for Redis to say whether it won");
                    }
                }
                debug!(job = %job.name, tick = %rfc3339(tick_ms), ambiguous = e.is_ambiguous(), error = %e, "claim failed; retrying");
                // Jitter: with `quorum`, replicas that split the masters
                // between them undo their claims and must not retry in step.
                let jitter = Duration::from_millis((Uuid::new_v4().as_u128() % 50) as u64);
                if !pause(backoff + jitter, cancel).await {
                    return ClaimEnd::Cancelled;
                }
                backoff = (backoff * 2).min(Duration::from_secs(1));
                continue;
            }
        };
        ctx.redis_answered();
        let tick = rfc3339(tick_ms);
        match reply {
            ClaimReply::Claimed {
                fence,
                started_ms,
                lease_key,
                expired,
                regressed,
                previous,
                acked,
            } => {
                let wanted = ctx.config.redis.min_replicas_ack;
                if let Some(acked) = acked.filter(|&acked| acked < wanted) {
                    count_claim(job, "not_durable");
                    ctx.marks.note(&job.name, Some(tick_ms), Some(fence));
                    warn!(job = %job.name, %tick, fence, %run_id, acked, wanted, "claim not durable: fewer Redis replicas acknowledged it than min_replicas_ack within ack_timeout; not running it");
                    let outcome = Outcome {
                        job: job.name.clone(),
                        tick_ms,
                        fence,
                        run_id,
                        replica: ctx.identity.replica.clone(),
                        host: ctx.identity.host.clone(),
                        started_ms,
                        finished_ms: started_ms,
                        status: Status::NotDurable,
                        exit_code: None,
                        signal: None,
                        attempts: 0,
                        output: format!(
                            "[cronlease] the claim reached {acked} of {wanted} Redis replicas within ack_timeout; not run\n"
                        ),
                        trigger,
                        lease_key,
                    };
                    deliver(ctx, job, outcome).await;
                    return ClaimEnd::Answered(None);
                }
                count_claim(job, "claimed");
                metrics::histogram!(telemetry::TICK_LATENESS, "job" => job.name.clone())
                    .record((started_ms - tick_ms).max(0) as f64 / 1000.0);
                if regressed {
                    ctx.state_loss(Some(&job.name), "the job's high-water mark or fence in Redis was behind what this replica saw");
                }
                ctx.marks.note(&job.name, Some(tick_ms), Some(fence));
                info!(job = %job.name, %tick, fence, %run_id, replica = %ctx.identity.replica, trigger = trigger.as_str(), lateness_ms = started_ms - tick_ms, "claimed");
                let run = start_run(
                    ctx,
                    job,
                    RunStart {
                        tick_ms,
                        run_id,
                        fence,
                        lease_key,
                        started_ms,
                        trigger,
                        valid_from: sent,
                    },
                );
                record_missed(ctx, job, previous, tick_ms).await;
                if expired > 0 {
                    sweep(ctx, job).await;
                }
                return ClaimEnd::Answered(Some(run));
            }
            ClaimReply::Early { ms } => {
                count_claim(job, "early");
                debug!(job = %job.name, %tick, early_ms = ms, "early by Redis time; waiting");
                if !pause(
                    Duration::from_millis(u64::try_from(ms).unwrap_or(1).max(1)),
                    cancel,
                )
                .await
                {
                    return ClaimEnd::Cancelled;
                }
            }
            ClaimReply::Wait { ms } => {
                count_claim(job, "wait");
                debug!(job = %job.name, %tick, "a run is in flight; catch-up waits");
                let wait = Duration::from_millis(u64::try_from(ms).unwrap_or(100).clamp(20, 1000));
                if !pause(wait, cancel).await {
                    return ClaimEnd::Cancelled;
                }
            }
            ClaimReply::Expired { late_ms } => {
                count_claim(job, "expired");
                warn!(job = %job.name, %tick, %run_id, late_ms, "tick not claimed: Redis unreachable until after the claim deadline");
                return ClaimEnd::Late;
            }
            ClaimReply::Lapsed => {
                count_claim(job, "lapsed");
                warn!(job = %job.name, %tick, %run_id, "the claim won, but its lease lapsed before Redis answered: not running it; recording it abandoned");
                sweep(ctx, job).await;
                return ClaimEnd::Answered(None);
            }
            ClaimReply::Taken {
                last_tick,
                regressed,
                fence,
            } => {
                if regressed {
                    ctx.state_loss(
                        Some(&job.name),
                        "the job's high-water mark in Redis was behind what this replica saw",
                    );
                }
                count_claim(job, "taken");
                ctx.marks.note(&job.name, Some(last_tick), Some(fence));
                debug!(job = %job.name, %tick, "taken by another replica");
                return ClaimEnd::Answered(None);
            }
            ClaimReply::Paused {
                previous, fence, ..
            } => {
                count_claim(job, "paused");
                ctx.marks.note(&job.name, Some(tick_ms), Some(fence));
                info!(job = %job.name, %tick, "job is paused; tick skipped");
                record_missed(ctx, job, previous, tick_ms).await;
                return ClaimEnd::Answered(None);
            }
            ClaimReply::Busy {
                holder,
                previous,
                fence,
                ..
            } => {
                count_claim(job, "busy");
                ctx.marks.note(&job.name, Some(tick_ms), Some(fence));
                info!(job = %job.name, %tick, %holder, "a run is still in flight; tick recorded as skipped_overlap");
                record_missed(ctx, job, previous, tick_ms).await;
                return ClaimEnd::Answered(None);
            }
        }
    }
}

fn count_claim(job: &Job, result: &'static str) {
    metrics::counter!(telemetry::CLAIMS, "job" => job.name.clone(), "result" => result)
        .increment(1);
}

/// At most this many missed ticks are recorded one by one after a gap.
const MAX_MISSED_RECORDED: usize = 1000;

/// Records the schedule's ticks strictly between `previous` (the high-water
/// mark this claim moved past) and `tick_ms` as missed: nobody claimed them.
/// Only the replica whose claim moved the mark sees the gap, and the script
/// records each tick once.
async fn record_missed(ctx: &Ctx, job: &Job, previous: i64, tick_ms: i64) {
    if previous < 0 {
        return;
    }
    let mut missed = Vec::new();
    let mut cursor = to_datetime(previous);
    while let Some(next) = job.schedule.next_after(cursor) {
        let next_ms = next.timestamp_millis();
        if next_ms >= tick_ms || missed.len() >= MAX_MISSED_RECORDED {
            break;
        }
        missed.push(next_ms);
        cursor = next;
    }
    if missed.is_empty() {
        return;
    }
    let store = &ctx.store;
    match store
        .record_missed(
            &job.name,
            &missed,
            &ctx.identity.replica,
            &ctx.identity.host,
            ctx.config.daemon.history,
        )
        .await
    {
        Ok(0) => {}
        Ok(n) => {
            metrics::counter!(telemetry::MISSED_TICKS, "job" => job.name.clone()).increment(n);
            warn!(
                job = %job.name, missed = n, first = %rfc3339(missed[0]), last = %rfc3339(missed[missed.len() - 1]),
                "ticks nobody claimed recorded as missed"
            );
        }
        Err(e) => {
            ctx.redis_failed(&e);
            warn!(job = %job.name, error = %e, "cannot record missed ticks");
        }
    }
}

/// A claimed tick about to run.
struct RunStart {
    tick_ms: i64,
    run_id: String,
    fence: u64,
    lease_key: String,
    /// Redis time of the claim.
    started_ms: i64,
    trigger: Trigger,
    /// When the claim was sent: the lease is valid for `lease` from then.
    valid_from: Instant,
}

/// Starts a claimed run under the watchdog; the returned task ends when its
/// outcome is recorded or spooled.
fn start_run(ctx: &Arc<Ctx>, job: &Arc<Job>, start: RunStart) -> JoinHandle<()> {
    let (stop_tx, stop_rx) = watch::channel(None);
    ctx.watchdog.send(watchdog::Command::Hold(LeaseHold {
        job: job.name.clone(),
        run_id: start.run_id.clone(),
        tick_ms: start.tick_ms,
        fence: start.fence,
        lease_key: start.lease_key.clone(),
        replica: ctx.identity.replica.clone(),
        valid_from: start.valid_from,
        stop: stop_tx,
    }));
    let mut env: Vec<(String, String)> = job
        .env
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    env.extend([
        ("CRONLEASE_JOB".to_string(), job.name.clone()),
        (
            "CRONLEASE_TICK".to_string(),
            to_datetime(start.tick_ms).to_rfc3339_opts(SecondsFormat::Secs, true),
        ),
        ("CRONLEASE_TICK_MS".to_string(), start.tick_ms.to_string()),
        ("CRONLEASE_FENCE".to_string(), start.fence.to_string()),
        ("CRONLEASE_RUN_ID".to_string(), start.run_id.clone()),
        (
            "CRONLEASE_REPLICA".to_string(),
            ctx.identity.replica.clone(),
        ),
    ]);
    let spec = RunSpec {
        job: job.name.clone(),
        run_id: start.run_id.clone(),
        tick: rfc3339(start.tick_ms),
        fence: start.fence,
        replica: ctx.identity.replica.clone(),
        command: job.command.clone(),
        workdir: job.workdir.clone(),
        env,
        timeout: job.timeout,
        kill_grace: ctx.config.daemon.kill_grace,
        retries: job.retries,
        retry_backoff: job.retry_backoff,
        output_tail_bytes: ctx.config.daemon.output_tail_bytes,
        stdio: runner::StdioMode::Capture,
    };
    let ctx2 = ctx.clone();
    let job = job.clone();
    ctx.runs.spawn(async move {
        let ctx = ctx2;
        // A panic in the run must not leave its lease renewed forever: it
        // becomes a failed outcome, and the lease is released as always.
        let result = match std::panic::AssertUnwindSafe(runner::execute(&spec, stop_rx)).catch_unwind().await {
            Ok(result) => result,
            Err(_) => {
                error!(job = %spec.job, run_id = %spec.run_id, "the run panicked; recording it as failed");
                runner::RunResult {
                    status: Status::Failed,
                    exit_code: None,
                    signal: None,
                    attempts: 1,
                    output: "[cronlease] internal error: the run panicked (see the replica's log)\n".to_string(),
                }
            }
        };
        // Release before finishing, and wait for the watchdog to drop the
        // lease: a renewal racing the finish would see the lease gone.
        let (done_tx, done_rx) = oneshot::channel();
        ctx.watchdog.send(watchdog::Command::Release {
            run_id: start.run_id.clone(),
            done: done_tx,
        });
        let _ = done_rx.await;
        let outcome = Outcome {
            job: spec.job.clone(),
            tick_ms: start.tick_ms,
            fence: start.fence,
            run_id: start.run_id,
            replica: ctx.identity.replica.clone(),
            host: ctx.identity.host.clone(),
            started_ms: start.started_ms,
            finished_ms: ctx.clock.now_ms(),
            status: result.status,
            exit_code: result.exit_code,
            signal: result.signal,
            attempts: result.attempts,
            output: result.output,
            trigger: start.trigger,
            lease_key: start.lease_key,
        };
        info!(
            job = %outcome.job, tick = %rfc3339(outcome.tick_ms), fence = outcome.fence, run_id = %outcome.run_id,
            replica = %outcome.replica, status = %outcome.status, exit_code = outcome.exit_code,
            attempts = outcome.attempts, duration_ms = outcome.finished_ms - outcome.started_ms, "finished"
        );
        metrics::counter!(telemetry::RUNS, "job" => outcome.job.clone(), "status" => outcome.status.as_str()).increment(1);
        metrics::histogram!(telemetry::RUN_DURATION, "job" => outcome.job.clone())
            .record((outcome.finished_ms - outcome.started_ms).max(0) as f64 / 1000.0);
        if outcome.status == Status::Ok {
            metrics::gauge!(telemetry::LAST_SUCCESS, "job" => outcome.job.clone()).set(outcome.finished_ms as f64 / 1000.0);
        }
        deliver(&ctx, &job, outcome).await;
    })
}

/// Writes an outcome to Redis, or spools it when Redis does not take it.
/// Starts the job's pending rerun if the finish hands one over.
async fn deliver(ctx: &Arc<Ctx>, job: &Arc<Job>, outcome: Outcome) {
    let rerun_id = Uuid::new_v4().to_string();
    let offer = RerunOffer {
        overlap: job.overlap,
        lease: ctx.config.daemon.lease,
        new_run_id: &rerun_id,
        min_fence: ctx.marks.get(&job.name).fence,
        replica: &ctx.identity.replica,
        host: &ctx.identity.host,
    };
    let offer = (job.on_holder_lost == OnHolderLost::Rerun && !ctx.claiming.is_cancelled())
        .then_some(&offer);
    for attempt in 0..3 {
        let sent = Instant::now();
        match ctx
            .store
            .finish(&outcome, ctx.config.daemon.history, offer)
            .await
        {
            Ok(reply) => {
                ctx.redis_answered();
                log_finish(&outcome, &reply);
                if let Some(rerun) = reply.rerun {
                    start_rerun(ctx, job, rerun, rerun_id, sent);
                }
                return;
            }
            Err(e) => {
                ctx.redis_failed(&e);
                debug!(run_id = %outcome.run_id, attempt, error = %e, "cannot record outcome yet");
                sleep(Duration::from_millis(200)).await;
            }
        }
    }
    match ctx.spool.save(&outcome) {
        Ok(path) => {
            warn!(job = %outcome.job, run_id = %outcome.run_id, path = %path.display(), "Redis unreachable; outcome spooled");
            count_spooled(ctx);
            ctx.spooled.notify_one();
        }
        Err(e) => error!(
            error = %e, outcome = %serde_json::to_string(&outcome).unwrap_or_default(),
            "cannot spool the outcome either; it is only in this log"
        ),
    }
}

fn log_finish(outcome: &Outcome, reply: &FinishReply) {
    let (run_id, id) = (&outcome.run_id, &reply.id);
    match reply.recorded {
        Recorded::Current => debug!(%run_id, stream_id = %id, "outcome recorded"),
        Recorded::Stale => warn!(
            job = %outcome.job, %run_id, stream_id = %id,
            "outcome recorded as stale: another replica had already recorded this run (abandoned)"
        ),
        Recorded::Duplicate => debug!(%run_id, stream_id = %id, "outcome was already recorded"),
    }
}

/// Starts a rerun that a sweep or a finish started in Redis for us.
fn start_rerun(ctx: &Arc<Ctx>, job: &Arc<Job>, rerun: Rerun, run_id: String, sent: Instant) {
    ctx.marks.note(&job.name, None, Some(rerun.fence));
    info!(
        job = %job.name, tick = %rfc3339(rerun.tick_ms), fence = rerun.fence, %run_id,
        "claimed a rerun of an abandoned tick"
    );
    start_run(
        ctx,
        job,
        RunStart {
            tick_ms: rerun.tick_ms,
            run_id,
            fence: rerun.fence,
            lease_key: rerun.lease_key,
            started_ms: rerun.started_ms,
            trigger: Trigger::Rerun,
            valid_from: sent,
        },
    );
    ctx.heartbeat_now.notify_one();
}

/// Records abandoned runs of `job` and starts the rerun, if the job wants one.
async fn sweep(ctx: &Arc<Ctx>, job: &Arc<Job>) {
    loop {
        let new_run_id = Uuid::new_v4().to_string();
        let sent = Instant::now();
        let request = SweepRequest {
            job: &job.name,
            replica: &ctx.identity.replica,
            host: &ctx.identity.host,
            history: ctx.config.daemon.history,
            rerun: job.on_holder_lost == OnHolderLost::Rerun && !ctx.claiming.is_cancelled(),
            overlap: job.overlap,
            lease: ctx.config.daemon.lease,
            new_run_id: &new_run_id,
            min_fence: ctx.marks.get(&job.name).fence,
        };
        let reply = match ctx.store.sweep(&request).await {
            Ok(reply) => reply,
            Err(e) => {
                ctx.redis_failed(&e);
                warn!(job = %job.name, error = %e, "cannot sweep abandoned runs");
                return;
            }
        };
        if reply.abandoned > 0 {
            warn!(job = %job.name, abandoned = reply.abandoned, "recorded runs whose replica died as abandoned");
        }
        let Some(rerun) = reply.rerun else { return };
        start_rerun(ctx, job, rerun, new_run_id, sent);
        // With overlap = "allow" further pending reruns can start now; else
        // the finish of this one starts the next.
        if job.overlap != Overlap::Allow {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rendezvous_spreads_ticks_evenly_and_ranks_are_a_permutation() {
        let replicas = ["web-1", "web-2", "web-3"];
        let mut first = [0usize; 3];
        for tick in 0..3000 {
            let tick_ms = 1_795_000_000_000 + tick * 1000;
            let mut scores: Vec<(u64, usize)> = replicas
                .iter()
                .enumerate()
                .map(|(i, r)| (rendezvous_score(r, "draw", tick_ms), i))
                .collect();
            scores.sort_unstable_by(|a, b| b.cmp(a));
            first[scores[0].1] += 1;
        }
        for count in first {
            assert!((850..=1150).contains(&count), "uneven: {first:?}");
        }
    }
}
