//! What every task of a replica shares (`Ctx`), by owner: what claims
//! need, what runs need, and the timer; what both record; who the
//! replica is; and the two views that keep `claim.rs` from the runs and
//! `runs.rs` from the claims ([`ClaimSide`], [`RunSide`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::{Notify, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{error, info};
use uuid::Uuid;

use super::capacity::Capacity;
use super::error::DaemonError;
use super::latency::ClaimLatency;
use super::meters::Meters;
use super::state::{DrainSwitch, LiveReplicas, MarkBook};
use super::step::Step;
use super::table::JobTable;
use super::timer;
use crate::clock::{RedisClock, local_now_ms};
use crate::config::{Config, Job};
use crate::outcome::Outcome;
use crate::spool::Spool;
use crate::store::{Claimant, ClusterHold, ClusterPause, Notices, Store, StoreError};

use super::notices::job_notices;
use crate::task::Tasks;
use crate::telemetry;
use crate::watchdog;

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

/// What every task of a replica shares: the config, the job table, the
/// store and the clock; what both the claim side and the run side record
/// (the marks, the meters, Redis's health); and three owners — what
/// claims need ([`Claims`]), what runs need ([`Runs`]) and the timer.
/// On a tick's path only `tick.rs` holds all of it: `claim.rs` sees it
/// through a [`ClaimSide`], which has no runs, and `runs.rs` and
/// `courier.rs` through a [`RunSide`], which has no claims. The replica's
/// start and drain (`mod.rs`), the scheduler and the tasks that serve both
/// sides (heartbeat, trigger consumer, claims listener) take it whole.
/// Mutable state is behind `std` mutexes never held across an `.await`.
pub(super) struct Ctx {
    /// The config the replica started with: its `[redis]` and `[daemon]`
    /// settings hold until restart.
    pub(super) config: Arc<Config>,
    /// The current job table (replaced by a reload).
    pub(super) jobs: watch::Sender<Arc<JobTable>>,
    pub(super) store: Store,
    pub(super) clock: RedisClock,
    pub(super) identity: Identity,
    pub(super) started_ms: i64,
    /// Cancelled when shutdown begins: no new run starts after that, not
    /// even a rerun handed over by a finish or a sweep.
    pub(super) claiming: CancellationToken,
    pub(super) redis: RedisHealth,
    /// Wakes the heartbeat after a claim, so the runs it lists are fresh if
    /// this replica dies soon after (others sweep what it lists).
    pub(super) heartbeat_now: Notify,
    /// Per job, the highest tick and fence seen (see [`MarkBook`]): raised
    /// by the claims of ticks, and by the reruns a finish or a sweep
    /// claims, and asked of Redis by both.
    pub(super) marks: MarkBook,
    /// Each job's metric handles: claims count into them, runs record
    /// their lateness, duration and status.
    pub(super) meters: Meters,
    pub(super) claims: Claims,
    pub(super) runs: Runs,
    /// Whether this replica claims (`cronlease drain`, shutdown).
    pub(super) drain: DrainSwitch,
    /// The replica's runs in flight and its `[daemon] max_runs`: a claim
    /// takes a slot before it is sent, a run gives it back when it ends.
    pub(super) capacity: Capacity,
    /// Every job's next wake-up (see `timer`).
    pub(super) timer: timer::Timer<Step>,
    /// The dashboard's tokens (replaced by a reload).
    pub(super) dashboard_keys: super::serve::DashboardKeys,
}

/// What the replica's tasks report of Redis: whether it answered last
/// time anyone asked (logged on change only), and the state losses they
/// detected.
pub(super) struct RedisHealth {
    pub(super) up: watch::Sender<bool>,
    /// Wakes the spool courier when Redis is back.
    pub(super) back: Notify,
    /// State-loss events detected (epoch changed, high-water mark behind).
    state_loss_events: AtomicU64,
}

impl RedisHealth {
    fn new() -> RedisHealth {
        RedisHealth {
            up: watch::Sender::new(true),
            back: Notify::new(),
            state_loss_events: AtomicU64::new(0),
        }
    }

    pub(super) fn answered(&self) {
        if !*self.up.borrow() {
            info!("Redis is reachable again");
            self.up.send_replace(true);
            self.back.notify_one();
        }
    }

    pub(super) fn failed(&self, error: &StoreError) {
        metrics::counter!(telemetry::REDIS_ERRORS).increment(1);
        if *self.up.borrow() {
            error!(error = %error, "Redis is unreachable; claiming nothing until it is back");
            self.up.send_replace(false);
        }
    }

    pub(super) fn state_loss(&self, job: Option<&str>, detail: &str) {
        let n = self.state_loss_events.fetch_add(1, Ordering::Relaxed) + 1;
        metrics::counter!(telemetry::STATE_LOSS).increment(1);
        error!(
            job = job.unwrap_or("-"),
            events = n,
            "REDIS STATE LOSS DETECTED: {detail}. Ticks and fences this replica remembers are enforced; \
             ticks only another replica saw may run again (see the guide, \"Guarantees and failure modes\")"
        );
    }
}

/// What only the claim path needs: whom to rank a tick's claim among,
/// and how long claims lately took.
pub(super) struct Claims {
    /// The candidates of the rendezvous ranking.
    pub(super) live: LiveReplicas,
    /// How long this replica's scheduled claims lately took (the
    /// rendezvous waits longer when they are slow).
    pub(super) latency: ClaimLatency,
    /// The cluster's pause record as last read (at start, at every
    /// heartbeat, and when a `pause --all` is announced): every claim
    /// carries it. Never held across an `.await`.
    pub(super) cluster_pause: std::sync::Mutex<Option<ClusterPause>>,
}

impl Claims {
    /// What a claim is told of the cluster's pause.
    pub(super) fn cluster_hold(&self) -> ClusterHold {
        self.cluster_pause
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .as_ref()
            .map_or(ClusterHold::None, ClusterPause::hold)
    }

    /// The cluster's pause record as last read.
    pub(super) fn cluster_pause(&self) -> Option<ClusterPause> {
        self.cluster_pause
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Keeps `record` as the cluster's pause; whether it differs from the
    /// one held.
    pub(super) fn hold_cluster_pause(&self, record: Option<ClusterPause>) -> bool {
        let mut held = self
            .cluster_pause
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let changed = *held != record;
        *held = record;
        changed
    }
}

/// What running needs: the tasks jobs run, the lease keeper, the spool for
/// outcomes Redis did not take, and the run tasks themselves.
pub(super) struct Runs {
    /// What each job runs (its command, unless the embedding program
    /// registered a task); replaced with the job table by an embedded
    /// scheduler's reload. Never held across an `.await`.
    pub(super) tasks: std::sync::RwLock<Tasks>,
    pub(super) watchdog: watchdog::Handle,
    /// Every run task; shutdown waits for it.
    pub(super) tracker: TaskTracker,
    pub(super) spool: Spool,
    /// Wakes the spool courier when an outcome was spooled.
    pub(super) spooled: Notify,
    /// Outcomes neither Redis nor the spool took (a full disk): the courier
    /// retries both. Never held across an `.await`.
    pub(super) unspooled: std::sync::Mutex<Vec<Outcome>>,
    /// How runs' processes are kept together, found when the first
    /// process job starts (an embedded scheduler never needs it).
    #[cfg(feature = "process")]
    containment: std::sync::OnceLock<crate::runner::Containment>,
    /// What runs may inherit of the replica's environment, and its secrets
    /// (taken at start, again by each reload: a token or channel it adds
    /// is a secret from then on). Never held across an `.await`.
    #[cfg(feature = "process")]
    pub(super) replica_env: std::sync::RwLock<crate::runner::ReplicaEnv>,
    /// The HTTP jobs' clients, built once per TLS and redirect setting
    /// and shared by their runs.
    #[cfg(feature = "http-jobs")]
    pub(super) http_clients: crate::http_job::HttpClients,
}

impl Runs {
    /// How this replica (`replica`) contains its runs' processes, found
    /// once per `setting`.
    #[cfg(feature = "process")]
    pub(super) fn containment(
        &self,
        replica: &str,
        setting: crate::config::ContainmentSetting,
    ) -> &crate::runner::Containment {
        self.containment
            .get_or_init(|| crate::runner::Containment::detect(replica, setting))
    }
}

/// What claiming a tick reads and records: the marks and the meters, the
/// claim latency, the store and the clock, who this replica is and its
/// settings. Nothing of the runs: a claim returns a value, and `tick.rs`
/// acts on it.
#[derive(Clone, Copy)]
pub(super) struct ClaimSide<'a> {
    pub(super) claims: &'a Claims,
    pub(super) marks: &'a MarkBook,
    pub(super) meters: &'a Meters,
    pub(super) store: &'a Store,
    pub(super) clock: &'a RedisClock,
    pub(super) identity: &'a Identity,
    pub(super) config: &'a Config,
    pub(super) redis: &'a RedisHealth,
    pub(super) drain: &'a DrainSwitch,
    pub(super) capacity: &'a Capacity,
}

impl<'a> ClaimSide<'a> {
    /// This replica as the claimant of `job`'s ticks (see [`claimant`]).
    pub(super) fn claimant<'b>(
        &self,
        job: &'b Job,
        min_fence: u64,
        notices: &'b Notices,
    ) -> Claimant<'b>
    where
        'a: 'b,
    {
        claimant(self.identity, self.config, job, min_fence, notices)
    }
}

/// What running, delivering and sweeping read and record: the runs, the
/// marks (reruns that a finish or a sweep claims raise the fence), the
/// meters, the store and the clock, who this replica is and its settings,
/// the heartbeat to wake and the shutdown that ends reruns. Nothing of the
/// claims.
#[derive(Clone, Copy)]
pub(super) struct RunSide<'a> {
    pub(super) runs: &'a Runs,
    pub(super) marks: &'a MarkBook,
    pub(super) meters: &'a Meters,
    pub(super) store: &'a Store,
    pub(super) clock: &'a RedisClock,
    pub(super) identity: &'a Identity,
    pub(super) config: &'a Config,
    pub(super) redis: &'a RedisHealth,
    pub(super) heartbeat_now: &'a Notify,
    pub(super) claiming: &'a CancellationToken,
    pub(super) drain: &'a DrainSwitch,
    pub(super) capacity: &'a Capacity,
    /// What [`RunSide::handle`] keeps: private, so that the run side
    /// cannot reach the rest through it.
    ctx: &'a Arc<Ctx>,
}

impl<'a> RunSide<'a> {
    /// This replica as the claimant of `job`'s reruns (see [`claimant`]).
    pub(super) fn claimant<'b>(
        &self,
        job: &'b Job,
        min_fence: u64,
        notices: &'b Notices,
    ) -> Claimant<'b>
    where
        'a: 'b,
    {
        claimant(self.identity, self.config, job, min_fence, notices)
    }

    /// The notification rules of the job named `job` in the current table
    /// (none once it left the table): for an outcome delivered from the
    /// spool or memory.
    pub(super) fn notices_of(&self, job: &str) -> Notices {
        let table = self.ctx.jobs.borrow().clone();
        table
            .get(job)
            .map_or_else(Notices::none, |job| job_notices(self.store.keys(), job))
    }

    /// Whether a run of `job` may hold a group's slot: a job no longer in
    /// the table may have had a group.
    pub(super) fn group_slot_of(&self, job: &str) -> crate::store::GroupSlot {
        let table = self.ctx.jobs.borrow().clone();
        table
            .get(job)
            .map_or(crate::store::GroupSlot::Maybe, |job| {
                crate::store::GroupSlot::of(job)
            })
    }

    /// The run side, owned, for a task that outlives this borrow (a run's).
    pub(super) fn handle(&self) -> RunHandle {
        RunHandle(self.ctx.clone())
    }

    /// How this replica contains its runs' processes (found once).
    #[cfg(feature = "process")]
    pub(super) fn containment(&self) -> &'a crate::runner::Containment {
        self.runs
            .containment(&self.identity.replica, self.config.daemon.containment)
    }
}

/// The run side, owned: what a run's task and the spool courier keep.
/// It opens only as a [`RunSide`].
#[derive(Clone)]
pub(super) struct RunHandle(Arc<Ctx>);

impl RunHandle {
    pub(super) fn side(&self) -> RunSide<'_> {
        self.0.run_side()
    }
}

/// Whether this replica (its `[daemon] tags` in `config`) may start runs
/// of `job`: it has every tag of the job's `run_on`. A replica that may
/// not starts no run of it: no tick, catch-up, manual run, follower,
/// backfill or rerun.
pub(super) fn placed_here(config: &Config, job: &Job) -> bool {
    crate::config::tags_match(&config.daemon.tags, &job.run_on)
}

/// This replica as the claimant of `job`'s ticks, runs and reruns;
/// `min_fence` is the highest fence it has seen for the job (its marks),
/// `notices` the job's notification rules ([`job_notices`]).
fn claimant<'a>(
    identity: &'a Identity,
    config: &Config,
    job: &'a Job,
    min_fence: u64,
    notices: &'a Notices,
) -> Claimant<'a> {
    Claimant {
        replica: &identity.replica,
        host: &identity.host,
        lease: config.daemon.lease,
        overlap: job.overlap,
        history: config.daemon.history,
        min_fence,
        notices,
        max_runs: job.max_runs,
        group: job.group.as_ref(),
    }
}

/// What a replica's `Ctx` is made of besides its config.
pub(super) struct Parts {
    pub(super) store: Store,
    pub(super) clock: RedisClock,
    pub(super) tasks: Tasks,
    pub(super) identity: Identity,
    pub(super) spool: Spool,
    pub(super) watchdog: watchdog::Handle,
    #[cfg(feature = "process")]
    pub(super) replica_env: crate::runner::ReplicaEnv,
    pub(super) dashboard_keys: super::serve::DashboardKeys,
}

impl Ctx {
    pub(super) fn new(
        config: Arc<Config>,
        jobs: Arc<JobTable>,
        parts: Parts,
        claiming: CancellationToken,
    ) -> Ctx {
        let capacity = Capacity::new(config.daemon.max_runs);
        Ctx {
            jobs: watch::Sender::new(jobs),
            marks: MarkBook::load(config.daemon.state_dir.join("marks.json"), local_now_ms()),
            meters: Meters::default(),
            claims: Claims {
                live: LiveReplicas::new(&parts.identity.replica, &config.daemon.tags),
                latency: ClaimLatency::default(),
                cluster_pause: std::sync::Mutex::new(None),
            },
            runs: Runs {
                tasks: std::sync::RwLock::new(parts.tasks),
                watchdog: parts.watchdog,
                tracker: TaskTracker::new(),
                spool: parts.spool,
                spooled: Notify::new(),
                unspooled: std::sync::Mutex::new(Vec::new()),
                #[cfg(feature = "process")]
                containment: std::sync::OnceLock::new(),
                #[cfg(feature = "process")]
                replica_env: std::sync::RwLock::new(parts.replica_env),
                #[cfg(feature = "http-jobs")]
                http_clients: crate::http_job::HttpClients::default(),
            },
            config,
            store: parts.store,
            clock: parts.clock,
            identity: parts.identity,
            started_ms: local_now_ms(),
            claiming,
            redis: RedisHealth::new(),
            heartbeat_now: Notify::new(),
            drain: DrainSwitch::new(),
            capacity,
            timer: timer::Timer::default(),
            dashboard_keys: parts.dashboard_keys,
        }
    }

    /// The claim side of the replica, for `claim.rs`.
    pub(super) fn claim_side(&self) -> ClaimSide<'_> {
        ClaimSide {
            claims: &self.claims,
            marks: &self.marks,
            meters: &self.meters,
            store: &self.store,
            clock: &self.clock,
            identity: &self.identity,
            config: &self.config,
            redis: &self.redis,
            drain: &self.drain,
            capacity: &self.capacity,
        }
    }

    /// The run side of the replica, for `runs.rs` and `courier.rs`.
    pub(super) fn run_side(self: &Arc<Ctx>) -> RunSide<'_> {
        RunSide {
            runs: &self.runs,
            marks: &self.marks,
            meters: &self.meters,
            store: &self.store,
            clock: &self.clock,
            identity: &self.identity,
            config: &self.config,
            redis: &self.redis,
            heartbeat_now: &self.heartbeat_now,
            claiming: &self.claiming,
            drain: &self.drain,
            capacity: &self.capacity,
            ctx: self,
        }
    }

    /// How this replica contains its runs' processes (found once).
    #[cfg(feature = "process")]
    fn containment(&self) -> &crate::runner::Containment {
        self.runs
            .containment(&self.identity.replica, self.config.daemon.containment)
    }

    /// A replica that runs commands says at once how it contains them,
    /// and refuses to start when it cannot (`containment = "cgroup"`
    /// without cgroups, limits its cgroups cannot apply).
    pub(super) fn check_runner(&self, table: &JobTable) -> Result<(), DaemonError> {
        #[cfg(feature = "process")]
        if table.values().any(|job| {
            crate::runner::Process::argv(&job.command).is_some()
                && self
                    .runs
                    .tasks
                    .read()
                    .is_ok_and(|tasks| tasks.registered(&job.name).is_none())
        }) {
            if let crate::runner::Containment::Unavailable(reason) = self.containment() {
                return Err(DaemonError::Containment(reason.clone()));
            }
            self.check_limits(table).map_err(DaemonError::Limits)?;
        }
        #[cfg(not(feature = "process"))]
        let _ = table;
        Ok(())
    }

    /// Whether every job of `table` with resource limits can have them
    /// here; the first that cannot, and why.
    pub(super) fn check_limits(&self, table: &JobTable) -> Result<(), String> {
        table
            .values()
            .try_for_each(|job| self.check_job_limits(job))
    }

    /// Whether `job`'s resource limits, if it has any, can be applied here;
    /// why not.
    pub(super) fn check_job_limits(&self, job: &Job) -> Result<(), String> {
        #[cfg(feature = "process")]
        if job.limits != crate::config::Limits::default() {
            self.containment().check_limits(&job.limits).map_err(|reason| {
                format!("job {:?}: its memory_max, cpu_max or tasks_max cannot be applied: {reason}", job.name)
            })?;
        }
        #[cfg(not(feature = "process"))]
        let _ = job;
        Ok(())
    }

    /// `cgroup` or `process_group` once the replica has found out (it has
    /// process jobs), for its heartbeat.
    pub(super) fn containment_name(&self) -> Option<&'static str> {
        #[cfg(feature = "process")]
        return self
            .runs
            .containment
            .get()
            .map(crate::runner::Containment::as_str);
        #[cfg(not(feature = "process"))]
        None
    }

    /// This replica as the claimant of `job`'s manual runs (see
    /// [`claimant`]).
    pub(super) fn claimant<'b>(
        &'b self,
        job: &'b Job,
        min_fence: u64,
        notices: &'b Notices,
    ) -> Claimant<'b> {
        claimant(&self.identity, &self.config, job, min_fence, notices)
    }
}
