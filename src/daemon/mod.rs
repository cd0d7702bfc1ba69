//! The replica: schedules every job, claims its ticks, runs what it wins,
//! records outcomes, and shuts down cleanly.
//!
//! [`run`] is the whole life of a replica, given its [`World`] (the store,
//! the clock, the tasks its jobs run: [`connect`] waits for Redis as long as
//! it takes, so the daemon never exits because Redis is away) and its
//! shutdown signal. It checks that Redis cannot evict our keys, then starts
//! its tasks, each owned by a [`TaskTracker`] and stopped through
//! [`CancellationToken`]s:
//!
//! - one **job loop** per job (`tick`): sleeps until the next tick by Redis
//!   time, claims it (`claim`, which returns a value) and acts on the value
//!   in one place (`tick::follow`); on start and after Redis was away,
//!   catches up missed ticks per the job's misfire policy. Between ticks a
//!   loop is an alarm in the replica's one **timer** (`timer`), whose task
//!   starts a short task for each due job;
//! - **runs** (`runs`): a won tick's task ([`crate::task`]) under the
//!   watchdog's lease, its outcome delivered, the rerun it hands over started;
//! - the **watchdog** ([`crate::watchdog`]): renews leases, stops runs whose
//!   lease is lost;
//! - the **heartbeat**: announces the replica, measures the Redis clock
//!   offset, detects state loss (the epoch key) and dead replicas (whose runs
//!   it sweeps);
//! - the **spool courier** (`courier`): delivers outcomes that could not
//!   reach Redis;
//! - the **trigger consumer** (`triggers`): runs manual requests (`cronlease
//!   trigger`) from the triggers stream, as one consumer of the replicas'
//!   group, and takes over requests whose consumer died (`XAUTOCLAIM`);
//! - the **claims listener** (`rendezvous`): the claims other replicas
//!   announce, which let a replica skip a tick whose claim it saw;
//! - the **notifier** (`notifier`, feature `notify`): delivers the
//!   notification events the scripts wrote, as one consumer of the
//!   replicas' group on each events stream, and keeps the dead man's
//!   switches.
//!
//! This file holds the replica's life (start, supervise, drain); `ctx`
//! what its tasks share, by owner (`Claims`, `Runs`, the timer), and the
//! claim side's and the run side's views of it;
//! `scheduler` the job loops and reloads; `state` the marks and the live
//! replicas.
//!
//! Runs are tasks of their own (in `Runs::tracker`), so a job loop never waits
//! for a run (except for `misfire = "run_all"` catch-up, which runs missed
//! ticks one after another).
//!
//! Shutdown (the `shutdown` token) is one drain with one deadline: job loops
//! stop claiming; loops and runs get `shutdown_grace`, then runs are
//! interrupted (SIGTERM, `kill_grace`, SIGKILL) and their outcomes written
//! (or spooled); then the background tasks stop; the replica removes its
//! heartbeat and returns.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tokio::time::{Instant, sleep, timeout, timeout_at};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{error, info, warn};

use crate::clock::{RedisClock, local_now_us};
use crate::config::{Config, RedisConfig};
use crate::spool::{Spool, SpoolError};
use crate::store::{ServerSettings, Store, StoreError};
use crate::task::{Stop, Tasks};
use crate::telemetry;
use crate::watchdog::{self};
use systemd::Notice;

mod backfill;
mod capacity;
mod claim;
mod courier;
mod ctx;
mod ending;
mod error;
mod follow;
mod heartbeat;
mod kills;
mod latency;
mod meters;
mod notices;
#[cfg(feature = "notify")]
mod notifier;
mod rendezvous;
mod room;
mod runs;
mod scheduler;
mod serve;
mod state;
mod step;
mod systemd;
mod table;
mod tick;
mod time;
mod timer;
mod triggers;
mod wake;

use courier::spool_courier;
pub use ctx::Identity;
use ctx::{Ctx, Parts};
pub use error::DaemonError;
use heartbeat::heartbeat_loop;
use rendezvous::claims_listener;
#[cfg(feature = "process")]
use runs::replica_env;
pub use scheduler::Reload;
use scheduler::{Scheduler, notify, reload_jobs};
use serve::{dashboard_token, start_dashboard, start_metrics};
use table::job_table;

/// What a replica is handed instead of building it: its connection to
/// Redis ([`connect`]), its clock, and what its jobs run.
pub struct World {
    /// Connected to the `[redis]` of the config (see [`connect`]).
    pub store: Store,
    /// The offset to Redis's clock; the heartbeat keeps it measured.
    pub clock: RedisClock,
    /// What each job runs.
    pub tasks: Tasks,
    /// Told once the replica claims ticks (after its checks of Redis and
    /// the state directory); dropped unsent if it stops before that.
    pub ready: Option<oneshot::Sender<()>>,
}

/// The replica's background tasks but the watchdog: heartbeat, spool
/// courier, marks keeper, claims listener and kill listener, owned by `background` and
/// stopped by `service`. The trigger consumer
/// and the chains' follower, which start runs, are the scheduler's.
fn start_background(ctx: &Arc<Ctx>, background: &TaskTracker, service: &CancellationToken) {
    background.spawn(heartbeat_loop(ctx.clone(), service.clone()));
    background.spawn(spool_courier(ctx.run_side().handle(), service.clone()));
    background.spawn(marks_keeper(ctx.clone(), service.clone()));
    background.spawn(claims_listener(ctx.clone(), service.clone()));
    background.spawn(kills::kill_listener(ctx.clone(), service.clone()));
}

/// Starts delivering notifications when the config has channels (the
/// config refuses them with `quorum`).
#[cfg(feature = "notify")]
fn start_notifier(
    ctx: &Arc<Ctx>,
    background: &TaskTracker,
    service: &CancellationToken,
) -> Result<(), DaemonError> {
    let channels = crate::notify::Channels::build(&ctx.config.notify)?;
    if !channels.is_empty() && !ctx.store.is_quorum() {
        background.spawn(notifier::notifier(
            ctx.clone(),
            Arc::new(channels),
            service.clone(),
        ));
    }
    Ok(())
}

/// Opens the spool (listing it, tightening its modes) off the async
/// workers.
async fn open_spool(config: &Config) -> Result<Spool, SpoolError> {
    let (dir, max_bytes) = (
        config.daemon.state_dir.clone(),
        config.daemon.spool_max_bytes,
    );
    tokio::task::spawn_blocking(move || Spool::open(&dir, max_bytes))
        .await
        .unwrap_or_else(|e| {
            Err(SpoolError {
                path: config.daemon.state_dir.join("spool"),
                source: std::io::Error::other(format!("the spool's blocking task failed: {e}")),
            })
        })
}

/// Runs a replica until `shutdown` is cancelled and every task is drained
/// (within one deadline). `reload` asks for the job table to be read again.
pub async fn run(
    config: Config,
    world: World,
    shutdown: CancellationToken,
    mut reload: mpsc::UnboundedReceiver<Reload>,
) -> Result<(), DaemonError> {
    // The jobs move to the job table: the config keeps its sections, so a
    // large table is held once, not twice.
    let mut config = config;
    let jobs = job_table(std::mem::take(&mut config.jobs));
    let config = Arc::new(config);
    let identity = Identity::new(config.replica_id());
    let spool = open_spool(&config).await?;
    let dashboard_token = dashboard_token(&config)?;
    info!(
        replica = %identity.replica, host = %identity.host, jobs = jobs.len(),
        redis = %config.redis.describe(), "starting"
    );
    let World {
        store,
        clock,
        tasks,
        ready,
    } = world;
    check_server_settings(&store).await?;

    let service = CancellationToken::new();
    let claiming = shutdown.child_token();
    let (watchdog, watchdog_task) =
        watchdog::new(store.clone(), config.daemon.lease, service.clone());
    let parts = Parts {
        store,
        clock,
        tasks,
        identity,
        spool,
        watchdog,
        #[cfg(feature = "process")]
        replica_env: replica_env(&config, &jobs, &dashboard_token),
        dashboard_keys: dashboard_token,
    };
    let ctx = Arc::new(Ctx::new(
        config.clone(),
        jobs.clone(),
        parts,
        claiming.clone(),
    ));
    ctx.check_runner(&jobs)?;
    measure_clock(&ctx).await;
    // Before the first claim: a cluster pause or a drain holds it.
    heartbeat::read_holds(&ctx).await;

    let background = TaskTracker::new();
    let health = start_services(&ctx, watchdog_task, &background, &service).await?;
    let mut scheduler = Scheduler::new(&ctx, claiming.clone());
    scheduler.apply(&ctx, &ctx.jobs.borrow().clone());
    notify(&[Notice::Ready], &ctx);
    info!(replica = %ctx.identity.replica, "ready");
    if let Some(ready) = ready {
        // Nobody waiting for it is no reason to stop.
        let _ = ready.send(());
    }

    supervise(&ctx, &mut scheduler, &health, &shutdown, &mut reload).await;
    stop(&ctx, &scheduler, &background, &service).await;
    Ok(())
}

/// The services beside the job loops, each stopped by `service`: the
/// health the supervisor beats (returned), the metrics and dashboard
/// listeners when configured, the watchdog (`watchdog_task`), the
/// background tasks and the notifier.
async fn start_services(
    ctx: &Arc<Ctx>,
    watchdog_task: impl Future<Output = ()> + Send + 'static,
    background: &TaskTracker,
    service: &CancellationToken,
) -> Result<Arc<telemetry::Health>, DaemonError> {
    let health = Arc::new(telemetry::Health::new(
        SUPERVISOR_PERIOD,
        ctx.redis.up.subscribe(),
    ));
    health.beat();
    let daemon = &ctx.config.daemon;
    if let Some(addr) = daemon.metrics_listen {
        start_metrics(addr, daemon, health.clone(), background, service).await;
    }
    if let Some(addr) = daemon.dashboard_listen {
        start_dashboard(addr, ctx, background, service).await;
    }
    background.spawn(watchdog_task);
    start_background(ctx, background, service);
    #[cfg(feature = "notify")]
    start_notifier(ctx, background, service)?;
    Ok(health)
}

/// The one shutdown path: systemd told, the drain within its deadline
/// (job loops, runs, background tasks), this replica's heartbeat removed.
async fn stop(
    ctx: &Arc<Ctx>,
    scheduler: &Scheduler,
    background: &TaskTracker,
    service: &CancellationToken,
) {
    systemd::notify(&[Notice::Stopping]);
    info!("shutting down: no more claims; waiting for runs in flight");
    // Out of the rendezvous at once: the record written now says so and
    // the others, told, rank without this replica, so no tick waits for
    // its turn while its runs finish.
    ctx.drain.stop();
    ctx.heartbeat_now.notify_one();
    drain(ctx, &scheduler.tracker, background, service).await;
    if let Err(e) = ctx.store.remove_replica(&ctx.identity.replica).await {
        warn!(error = %e, "cannot remove this replica's heartbeat");
    }
    info!("stopped");
}

/// The supervisor, until `shutdown`: reloads, and tells systemd it is
/// alive. It runs on the same runtime as every job loop, so a wedged
/// runtime stops the pings.
async fn supervise(
    ctx: &Arc<Ctx>,
    scheduler: &mut Scheduler,
    health: &telemetry::Health,
    shutdown: &CancellationToken,
    reload: &mut mpsc::UnboundedReceiver<Reload>,
) {
    let watchdog_period = systemd::watchdog_period();
    let mut beat = tokio::time::interval(SUPERVISOR_PERIOD);
    let mut last_ping = Instant::now();
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            Some(request) = reload.recv() => {
                // What else was asked meanwhile goes with it.
                let mut requests = vec![request];
                while let Ok(more) = reload.try_recv() {
                    requests.push(more);
                }
                reload_jobs(ctx, scheduler, requests).await;
            }
            _ = beat.tick() => {
                health.beat();
                if let Some(period) = watchdog_period
                    && last_ping.elapsed() >= period.min(SUPERVISOR_PERIOD * 5)
                {
                    last_ping = Instant::now();
                    notify(&[Notice::Alive], ctx);
                }
            }
        }
    }
}

/// Shutdown's one drain, with one deadline for every task: job loops and
/// runs get `shutdown_grace`; then runs are interrupted (SIGTERM,
/// `kill_grace`, SIGKILL) and their outcomes written; then the background
/// tasks (watchdog, heartbeat, courier, …) stop. Whatever is still going at
/// the deadline is logged and left to the runtime's end.
async fn drain(
    ctx: &Ctx,
    loops: &TaskTracker,
    background: &TaskTracker,
    service: &CancellationToken,
) {
    let daemon = &ctx.config.daemon;
    let command_timeout = ctx.config.redis.command_timeout;
    let deadline = Instant::now()
        + daemon.shutdown_grace
        + daemon.kill_grace
        + command_timeout * 4
        + Duration::from_secs(5);
    loops.close();
    ctx.runs.tracker.close();
    let work = || async {
        loops.wait().await;
        ctx.runs.tracker.wait().await;
    };
    if timeout(daemon.shutdown_grace, work()).await.is_err() {
        warn!(runs = ctx.runs.tracker.len(), grace = ?daemon.shutdown_grace, "runs still going after the shutdown grace; interrupting them");
        ctx.runs.watchdog.stop_all(Stop::Shutdown);
        if timeout_at(deadline, work()).await.is_err() {
            error!(
                runs = ctx.runs.tracker.len(),
                job_loops = loops.len(),
                "runs did not end after SIGKILL; exiting anyway"
            );
        }
    }
    service.cancel();
    background.close();
    let floor = Instant::now() + command_timeout;
    if timeout_at(deadline.max(floor), background.wait())
        .await
        .is_err()
    {
        error!(
            tasks = background.len(),
            "background tasks did not stop by the shutdown deadline; exiting anyway"
        );
    }
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

/// Connects to Redis, retrying with backoff until it works (the daemon
/// never exits because Redis is away); None when `shutdown` comes first.
pub async fn connect(config: &RedisConfig, shutdown: &CancellationToken) -> Option<Store> {
    if config.tls.insecure_skip_verify {
        warn!(
            "TLS CERTIFICATE VERIFICATION IS OFF (insecure_skip_verify = true): anyone on the network path can pose as Redis, read the job table's traffic and forge claims; set ca_file instead"
        );
    }
    let mut backoff = Duration::from_millis(200);
    loop {
        match Store::connect(config).await {
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
    let sent = local_now_us();
    match ctx.store.server_time_us().await {
        Ok(server) => {
            ctx.clock.observe(server, sent, local_now_us());
            info!(
                offset_ms = ctx.clock.offset_us().div_euclid(1000),
                "Redis clock offset measured"
            );
        }
        Err(e) => warn!(error = %e, "cannot read the Redis clock; assuming it matches ours"),
    }
}
