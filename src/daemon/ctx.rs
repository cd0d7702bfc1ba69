//! What every task of a replica shares (`Ctx`), by owner: what claims
//! need, what runs need, and the timer; and who the replica is.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::{Notify, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{error, info};
use uuid::Uuid;

use super::error::DaemonError;
use super::latency::ClaimLatency;
use super::meters::Meters;
use super::state::{LiveReplicas, MarkBook};
use super::step::Step;
use super::table::JobTable;
use super::timer;
use crate::clock::{RedisClock, local_now_ms};
use crate::config::{Config, Job};
use crate::outcome::Outcome;
use crate::spool::Spool;
use crate::store::{Claimant, NO_NOTICES, Store, StoreError};
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
/// store and the clock, and three owners — what claims need
/// ([`Claims`]), what runs need ([`Runs`]) and the timer. Only `tick.rs`
/// takes all three in turn. Mutable state is behind `std` mutexes never
/// held across an `.await`.
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
    /// Whether Redis answered last time anyone asked; logs on change only.
    pub(super) redis_up: watch::Sender<bool>,
    /// Wakes the heartbeat after a claim, so the runs it lists are fresh if
    /// this replica dies soon after (others sweep what it lists).
    pub(super) heartbeat_now: Notify,
    /// State-loss events detected (epoch changed, high-water mark behind).
    pub(super) state_loss_events: AtomicU64,
    pub(super) claims: Claims,
    pub(super) runs: Runs,
    /// Every job's next wake-up (see `timer`).
    pub(super) timer: timer::Timer<Step>,
}

/// What claiming needs besides the store and the clock.
pub(super) struct Claims {
    /// Per job, the highest tick and fence seen (see [`state::MarkBook`]).
    pub(super) marks: MarkBook,
    /// The candidates of the rendezvous ranking.
    pub(super) live: LiveReplicas,
    /// How long this replica's scheduled claims lately took (the
    /// rendezvous waits longer when they are slow).
    pub(super) latency: ClaimLatency,
    /// Each job's metric handles.
    pub(super) meters: Meters,
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
    /// Wakes the spool courier when an outcome was spooled or Redis is back.
    pub(super) spooled: Notify,
    /// Outcomes neither Redis nor the spool took (a full disk): the courier
    /// retries both. Never held across an `.await`.
    pub(super) unspooled: std::sync::Mutex<Vec<Outcome>>,
    /// How runs' processes are kept together, found when the first
    /// process job starts (an embedded scheduler never needs it).
    #[cfg(feature = "process")]
    pub(super) containment: std::sync::OnceLock<crate::runner::Containment>,
    /// What runs may inherit of the replica's environment, and its secrets
    /// (taken at start).
    #[cfg(feature = "process")]
    pub(super) replica_env: crate::runner::ReplicaEnv,
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
}

impl Ctx {
    pub(super) fn new(
        config: Arc<Config>,
        jobs: Arc<JobTable>,
        parts: Parts,
        claiming: CancellationToken,
    ) -> Ctx {
        Ctx {
            jobs: watch::Sender::new(jobs),
            claims: Claims {
                marks: MarkBook::load(config.daemon.state_dir.join("marks.json"), local_now_ms()),
                live: LiveReplicas::new(&parts.identity.replica),
                latency: ClaimLatency::default(),
                meters: Meters::default(),
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
                replica_env: parts.replica_env,
            },
            config,
            store: parts.store,
            clock: parts.clock,
            identity: parts.identity,
            started_ms: local_now_ms(),
            claiming,
            redis_up: watch::Sender::new(true),
            heartbeat_now: Notify::new(),
            state_loss_events: AtomicU64::new(0),
            timer: timer::Timer::default(),
        }
    }

    /// How this replica contains its runs' processes (found once).
    #[cfg(feature = "process")]
    pub(super) fn containment(&self) -> &crate::runner::Containment {
        self.runs.containment.get_or_init(|| {
            crate::runner::Containment::detect(
                &self.identity.replica,
                self.config.daemon.containment,
            )
        })
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

    /// This replica as the claimant of `job`'s ticks, runs and reruns;
    /// `min_fence` is the highest fence it has seen for the job (its marks).
    pub(super) fn claimant<'a>(&'a self, job: &Job, min_fence: u64) -> Claimant<'a> {
        Claimant {
            replica: &self.identity.replica,
            host: &self.identity.host,
            lease: self.config.daemon.lease,
            overlap: job.overlap,
            history: self.config.daemon.history,
            min_fence,
            notices: &NO_NOTICES,
        }
    }

    pub(super) fn redis_answered(&self) {
        if !*self.redis_up.borrow() {
            info!("Redis is reachable again");
            self.redis_up.send_replace(true);
            self.runs.spooled.notify_one();
        }
    }

    pub(super) fn redis_failed(&self, error: &StoreError) {
        metrics::counter!(telemetry::REDIS_ERRORS).increment(1);
        if *self.redis_up.borrow() {
            error!(error = %error, "Redis is unreachable; claiming nothing until it is back");
            self.redis_up.send_replace(false);
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
