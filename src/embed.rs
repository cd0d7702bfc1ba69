//! cronlease inside a Rust service: the same exactly-once ticks as the
//! daemon, around an async function.
//!
//! A service deployed as several instances connects each to the same Redis
//! ([`Cluster::connect`]), declares its jobs ([`JobBuilder`]) and starts a
//! [`Scheduler`]. At every tick the instances race for the claim exactly as
//! `cronlease run` replicas do (they are replicas: `cronlease status`,
//! `history`, `trigger`, `pause` and `resume` work on embedded jobs
//! unchanged), the winner calls the job's handler with a [`Run`] under a
//! watchdog-renewed lease, and the outcome goes to the job's stream.
//!
//! The handler gets the tick's fence: a write it makes should carry it, and
//! the store it writes to should refuse a fence lower than one it has seen
//! (a replica that lost its lease without knowing it then cannot overwrite
//! the newer run's work). It also gets a stop signal ([`Run::stopped`]):
//! when the lease is lost, the job's timeout passes or the scheduler shuts
//! down, the handler should stop; one that goes on is dropped after the
//! scheduler's `kill_grace`, and the outcome says so.
//!
//! ```no_run
//! use std::time::Duration;
//! use cronlease::{Cluster, JobBuilder, RedisSettings, Run};
//!
//! # async fn draw_winners(fence: u64) -> Result<(), std::io::Error> { Ok(()) }
//! # async fn service() -> Result<(), cronlease::EmbedError> {
//! let cluster = Cluster::connect(RedisSettings::url("redis://127.0.0.1:6379/0").key_prefix("shop")).await?;
//! let scheduler = cluster
//!     .scheduler()
//!     .job(
//!         JobBuilder::new("lottery-draw", "0 12 * * *")
//!             .timezone("Asia/Shanghai")
//!             .timeout(Duration::from_secs(300))
//!             .run(|run: Run| async move { draw_winners(run.fence()).await }),
//!     )
//!     .start()?;
//! // … serve requests …
//! scheduler.shutdown().await?;
//! # Ok(())
//! # }
//! ```

use std::error::Error as StdError;
use std::future::Future;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::clock::RedisClock;
use crate::config::{Config, ConfigError, Misfire, OnHolderLost, Overlap, Source};
use crate::daemon::{self, DaemonError, Reload, World};
use crate::outcome::{Status, Tail};
use crate::schedule::{DstGap, DstRepeat};
use crate::store::{Store, StoreError};
use crate::task::{Attempt, AttemptEnd, RunContext, Stop, StopSignal, Task, Tasks};

/// The name the embedded configuration's problems are reported under.
const SOURCE: &str = "<embedded scheduler>";

/// Why embedding failed.
///
/// ```no_run
/// use cronlease::{Cluster, EmbedError, RedisSettings};
///
/// # async fn f() {
/// match Cluster::connect(RedisSettings::url("redis://127.0.0.1:6379/0")).await {
///     Ok(_cluster) => {}
///     Err(EmbedError::Config(error)) => {
///         for problem in &error.problems {
///             eprintln!("{}: {}", problem.field.as_deref().unwrap_or("-"), problem.message);
///         }
///     }
///     Err(other) => eprintln!("{other}"),
/// }
/// # }
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EmbedError {
    /// A setting or a job is not valid: every problem, as `cronlease
    /// check` words it.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// Redis could not be reached, or did not do what was asked.
    #[error(transparent)]
    Redis(#[from] RedisError),
    /// The scheduler refused to run: Redis may evict keys (a lease could
    /// vanish and a tick run twice), or its state directory is unusable.
    #[error(transparent)]
    Refused(RefusedError),
    /// [`Scheduler::add`] of a job whose name is taken.
    #[error("a job named {0:?} is already scheduled")]
    JobExists(String),
    /// [`Scheduler::remove`] of a job that is not scheduled.
    #[error("no job named {0:?} is scheduled")]
    NoSuchJob(String),
    /// [`Scheduler::set_jobs`] with two jobs of the same name.
    #[error("two jobs are named {0:?}")]
    DuplicateJob(String),
    /// The scheduler's task ended without being asked to (a bug).
    #[error("the scheduler stopped by itself: {0}")]
    Stopped(String),
}

impl From<StoreError> for EmbedError {
    fn from(error: StoreError) -> EmbedError {
        EmbedError::Redis(RedisError(error))
    }
}

impl From<DaemonError> for EmbedError {
    fn from(error: DaemonError) -> EmbedError {
        EmbedError::Refused(RefusedError(error))
    }
}

/// Redis could not be reached, or did not do what was asked: which server,
/// what was asked and what came back are in the message.
///
/// ```no_run
/// # async fn f(cluster: cronlease::Cluster) {
/// if let Err(cronlease::LockError::Redis(error)) = cluster.lock("report").try_acquire().await {
///     eprintln!("no lock today: {error}");
/// }
/// # }
/// ```
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct RedisError(StoreError);

impl From<StoreError> for RedisError {
    fn from(error: StoreError) -> RedisError {
        RedisError(error)
    }
}

/// Why a scheduler refused to run (see [`EmbedError::Refused`]); the
/// message says what to change.
///
/// ```no_run
/// # async fn f(cluster: cronlease::Cluster) -> Result<(), cronlease::EmbedError> {
/// match cluster.scheduler().start()?.shutdown().await {
///     Err(cronlease::EmbedError::Refused(why)) => eprintln!("fix Redis or the state directory: {why}"),
///     other => other?,
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct RefusedError(DaemonError);

/// How to reach Redis: the `[redis]` section of a job table, as code.
///
/// ```
/// use std::time::Duration;
/// use cronlease::RedisSettings;
///
/// let settings = RedisSettings::url("redis://127.0.0.1:6379/0")
///     .key_prefix("shop")
///     .command_timeout(Duration::from_millis(500));
/// ```
#[derive(Debug, Clone)]
pub struct RedisSettings {
    table: toml::Table,
}

impl RedisSettings {
    /// One Redis server (or one endpoint in front of several), as
    /// `[redis] url`. Checked when the cluster connects.
    pub fn url(url: &str) -> RedisSettings {
        let mut table = toml::Table::new();
        table.insert("url".into(), url.into());
        RedisSettings { table }
    }

    /// Independent masters (at least 3), as `[redis] quorum`: a tick's
    /// claim and a lock hold only with a majority of them.
    pub fn quorum(urls: &[&str]) -> RedisSettings {
        let mut table = toml::Table::new();
        let urls = urls.iter().map(|u| toml::Value::from(*u)).collect();
        table.insert("quorum".into(), toml::Value::Array(urls));
        RedisSettings { table }
    }

    /// The first part of every key (`[redis] key_prefix`, default `cronlease`).
    pub fn key_prefix(self, prefix: &str) -> RedisSettings {
        self.set("key_prefix", prefix.into())
    }

    /// How long one command may take (`[redis] command_timeout`).
    pub fn command_timeout(self, timeout: Duration) -> RedisSettings {
        self.set("command_timeout", duration(timeout))
    }

    /// How long to wait for a connection (`[redis] connect_timeout`).
    pub fn connect_timeout(self, timeout: Duration) -> RedisSettings {
        self.set("connect_timeout", duration(timeout))
    }

    fn set(mut self, key: &str, value: toml::Value) -> RedisSettings {
        self.table.insert(key.into(), value);
        self
    }
}

/// A duration as the job table writes it.
fn duration(d: Duration) -> toml::Value {
    format!("{}ms", d.as_millis()).into()
}

/// A connection to the Redis the instances share.
#[derive(Clone)]
pub struct Cluster {
    redis: toml::Table,
    store: Store,
    /// This process as a lock holder (`<host>-<pid>`), and its host.
    holder: String,
    host: String,
}

impl Cluster {
    /// Checks the settings and connects; an error if Redis does not answer
    /// within the connect timeout (unlike the daemon, which waits forever).
    ///
    /// ```no_run
    /// # async fn f() -> Result<(), cronlease::EmbedError> {
    /// use cronlease::{Cluster, RedisSettings};
    /// let cluster = Cluster::connect(RedisSettings::url("redis://127.0.0.1:6379/0")).await?;
    /// # Ok(()) }
    /// ```
    pub async fn connect(settings: RedisSettings) -> Result<Cluster, EmbedError> {
        let config = document(&settings.table, &toml::Table::new(), &[])?;
        let store = Store::connect(&config.redis).await?;
        store.server_time_ms().await?;
        let identity = crate::daemon::Identity::new(None);
        Ok(Cluster {
            redis: settings.table,
            store,
            holder: format!("{}-{}", identity.host, identity.pid),
            host: identity.host,
        })
    }

    /// The cluster-wide lock `name` (a [`LockBuilder`](crate::LockBuilder)): set its lease
    /// and holder, then acquire it.
    ///
    /// ```no_run
    /// # async fn f(cluster: cronlease::Cluster) -> Result<(), cronlease::LockError> {
    /// if let Some(guard) = cluster.lock("report").try_acquire().await? {
    ///     // … only one instance is here …
    ///     guard.release().await?;
    /// }
    /// # Ok(()) }
    /// ```
    pub fn lock(&self, name: &str) -> crate::lock::LockBuilder {
        crate::lock::LockBuilder::new(self.store.clone(), name, &self.holder, &self.host)
    }

    /// A scheduler to declare jobs on, then [`SchedulerBuilder::start`].
    pub fn scheduler(&self) -> SchedulerBuilder {
        let mut daemon = toml::Table::new();
        // An embedding service serves its own metrics, if any.
        daemon.insert("metrics_listen".into(), "".into());
        SchedulerBuilder {
            cluster: self.clone(),
            daemon,
            jobs: Vec::new(),
        }
    }
}

/// The validated configuration of `jobs` under the `[redis]` and `[daemon]`
/// tables given (their work: the handlers).
fn document(
    redis: &toml::Table,
    daemon: &toml::Table,
    jobs: &[EmbeddedJob],
) -> Result<Config, ConfigError> {
    let mut root = toml::Table::new();
    root.insert("redis".into(), redis.clone().into());
    root.insert("daemon".into(), daemon.clone().into());
    let mut table = toml::Table::new();
    for job in jobs {
        table.insert(job.name.clone(), job.table.clone().into());
    }
    root.insert("jobs".into(), table.into());
    let text = toml::to_string(&root).unwrap_or_default();
    Config::parse_with(&text, Path::new(SOURCE), Source::Embedded).map_err(|mut error| {
        // Lines of a document the caller never saw mean nothing: the
        // job and field name the place.
        for problem in &mut error.problems {
            problem.line_col = None;
        }
        error
    })
}

/// A job of an embedded scheduler, before its handler: name, schedule and
/// the settings a `[jobs.<name>]` table has. Everything is checked by
/// [`SchedulerBuilder::start`] or [`Scheduler::add`], with the config's
/// messages.
///
/// ```
/// use std::time::Duration;
/// use cronlease::{Misfire, Overlap};
/// use cronlease::{JobBuilder, Run};
///
/// let job = JobBuilder::new("lottery-draw", "0 12 * * *")
///     .timezone("Asia/Shanghai")
///     .overlap(Overlap::Skip)
///     .misfire(Misfire::RunOnce)
///     .timeout(Duration::from_secs(300))
///     .run(|run: Run| async move { Ok::<(), std::io::Error>(()) });
/// ```
#[derive(Debug, Clone)]
pub struct JobBuilder {
    name: String,
    table: toml::Table,
}

impl JobBuilder {
    /// A job named `name` (letters, digits, `-`, `_`, `.`) on the cron
    /// expression `schedule` (5, 6 or 7 fields, `@daily`, `H`, …), UTC
    /// unless [`JobBuilder::timezone`] says otherwise.
    pub fn new(name: &str, schedule: &str) -> JobBuilder {
        let mut table = toml::Table::new();
        table.insert("schedule".into(), schedule.into());
        JobBuilder {
            name: name.to_string(),
            table,
        }
    }

    /// The IANA time zone the schedule is read in (`timezone`).
    pub fn timezone(self, zone: &str) -> JobBuilder {
        self.set("timezone", zone.into())
    }

    /// When a tick comes while a run is in flight (`overlap`).
    pub fn overlap(self, overlap: Overlap) -> JobBuilder {
        self.set("overlap", overlap.as_str().into())
    }

    /// Ticks missed while no instance could claim them (`misfire`).
    pub fn misfire(self, misfire: Misfire) -> JobBuilder {
        self.set("misfire", misfire.as_str().into())
    }

    /// How old a missed tick may be and still run (`misfire_grace`).
    pub fn misfire_grace(self, grace: Duration) -> JobBuilder {
        self.set("misfire_grace", duration(grace))
    }

    /// How long an attempt may run before it is stopped (`timeout`).
    pub fn timeout(self, timeout: Duration) -> JobBuilder {
        self.set("timeout", duration(timeout))
    }

    /// Extra attempts after a failure, under the same claim (`retries`).
    pub fn retries(self, retries: u32) -> JobBuilder {
        self.set("retries", i64::from(retries).into())
    }

    /// The wait between attempts (`retry_backoff`).
    pub fn retry_backoff(self, backoff: Duration) -> JobBuilder {
        self.set("retry_backoff", duration(backoff))
    }

    /// A fixed-time job's local time that a DST change skips (`dst_gap`).
    pub fn dst_gap(self, policy: DstGap) -> JobBuilder {
        self.set("dst_gap", policy.as_str().into())
    }

    /// A fixed-time job's local time that a DST change repeats
    /// (`dst_repeat`).
    pub fn dst_repeat(self, policy: DstRepeat) -> JobBuilder {
        self.set("dst_repeat", policy.as_str().into())
    }

    /// A run whose instance died: recorded, or run again (`on_holder_lost`).
    pub fn on_holder_lost(self, policy: OnHolderLost) -> JobBuilder {
        self.set("on_holder_lost", policy.as_str().into())
    }

    /// The job with its handler: an async function of the [`Run`] that
    /// returns `Ok(())` (the run is `ok`) or an error (`failed`, the error
    /// and its sources in the outcome's output). A panic is `failed` too.
    pub fn run<F, Fut, E>(self, handler: F) -> EmbeddedJob
    where
        F: Fn(Run) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), E>> + Send + 'static,
        E: Into<Box<dyn StdError + Send + Sync>> + 'static,
    {
        EmbeddedJob {
            name: self.name,
            table: self.table,
            handler: Arc::new(Handler { handler }),
        }
    }

    fn set(mut self, key: &str, value: toml::Value) -> JobBuilder {
        self.table.insert(key.into(), value);
        self
    }
}

/// A job with its handler, ready for a scheduler.
#[derive(Clone)]
pub struct EmbeddedJob {
    name: String,
    table: toml::Table,
    handler: Arc<dyn Task>,
}

impl EmbeddedJob {
    /// The job's name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

/// The jobs of a scheduler not started yet, and its replica settings.
pub struct SchedulerBuilder {
    cluster: Cluster,
    daemon: toml::Table,
    jobs: Vec<EmbeddedJob>,
}

impl SchedulerBuilder {
    /// Adds a job.
    pub fn job(mut self, job: EmbeddedJob) -> SchedulerBuilder {
        self.jobs.push(job);
        self
    }

    /// This instance's name in `status` and in outcomes (`replica_id`;
    /// default `<host>-<pid>-<4 hex>`).
    pub fn replica_id(self, id: &str) -> SchedulerBuilder {
        self.set("replica_id", id.into())
    }

    /// Where outcomes Redis could not take wait, and the remembered marks
    /// (`state_dir`); one per instance.
    pub fn state_dir(self, dir: &Path) -> SchedulerBuilder {
        self.set("state_dir", dir.to_string_lossy().into_owned().into())
    }

    /// The lease of a run (`lease`, renewed every third of it).
    pub fn lease(self, lease: Duration) -> SchedulerBuilder {
        self.set("lease", duration(lease))
    }

    /// How often this instance announces itself (`heartbeat`).
    pub fn heartbeat(self, period: Duration) -> SchedulerBuilder {
        self.set("heartbeat", duration(period))
    }

    /// How long [`Scheduler::shutdown`] lets runs finish before stopping
    /// them (`shutdown_grace`).
    pub fn shutdown_grace(self, grace: Duration) -> SchedulerBuilder {
        self.set("shutdown_grace", duration(grace))
    }

    /// Outcomes kept per job (`history`, default 1000).
    pub fn history(self, outcomes: u32) -> SchedulerBuilder {
        self.set("history", i64::from(outcomes).into())
    }

    /// How long a handler told to stop may go on before it is dropped
    /// (`kill_grace`).
    pub fn kill_grace(self, grace: Duration) -> SchedulerBuilder {
        self.set("kill_grace", duration(grace))
    }

    fn set(mut self, key: &str, value: toml::Value) -> SchedulerBuilder {
        self.daemon.insert(key.into(), value);
        self
    }

    /// Checks every job and setting (all problems at once) and starts the
    /// replica on the current tokio runtime (it must be called from within
    /// one: it spawns the replica's task there).
    pub fn start(self) -> Result<Scheduler, EmbedError> {
        let config = document(&self.cluster.redis, &self.daemon, &self.jobs)?;
        let shutdown = CancellationToken::new();
        let (reload, reload_rx) = mpsc::unbounded_channel();
        let (ready, ready_rx) = oneshot::channel();
        let world = World {
            store: self.cluster.store.clone(),
            clock: RedisClock::new(),
            tasks: tasks(&self.jobs),
            ready: Some(ready),
        };
        let replica = tokio::spawn(daemon::run(config, world, shutdown.clone(), reload_rx));
        Ok(Scheduler {
            redis: self.cluster.redis,
            daemon: self.daemon,
            jobs: self.jobs,
            shutdown,
            reload,
            ready: Some(ready_rx),
            replica: Some(replica),
        })
    }
}

fn tasks(jobs: &[EmbeddedJob]) -> Tasks {
    jobs.iter().fold(Tasks::processes(), |tasks, job| {
        tasks.job(&job.name, job.handler.clone())
    })
}

/// A running embedded scheduler: one replica of the cluster. Dropping it
/// begins the shutdown without waiting for it; [`Scheduler::shutdown`]
/// waits.
pub struct Scheduler {
    redis: toml::Table,
    daemon: toml::Table,
    jobs: Vec<EmbeddedJob>,
    shutdown: CancellationToken,
    reload: mpsc::UnboundedSender<Reload>,
    /// Answered once the replica claims; None once that was seen.
    ready: Option<oneshot::Receiver<()>>,
    replica: Option<JoinHandle<Result<(), DaemonError>>>,
}

impl Scheduler {
    /// Adds a job while running; an error (and no change) if it is not
    /// valid or its name is taken.
    pub fn add(&mut self, job: EmbeddedJob) -> Result<(), EmbedError> {
        if self.jobs.iter().any(|j| j.name == job.name) {
            return Err(EmbedError::JobExists(job.name));
        }
        let mut jobs = self.jobs.clone();
        jobs.push(job);
        self.replace(jobs)
    }

    /// Removes a job while running; a run in flight finishes.
    pub fn remove(&mut self, name: &str) -> Result<(), EmbedError> {
        if !self.jobs.iter().any(|j| j.name == name) {
            return Err(EmbedError::NoSuchJob(name.to_string()));
        }
        let jobs = self
            .jobs
            .iter()
            .filter(|j| j.name != name)
            .cloned()
            .collect();
        self.replace(jobs)
    }

    /// Replaces every job at once (a reload): jobs whose definition did
    /// not change keep running undisturbed; an error (and no change) if
    /// one is not valid or two share a name.
    pub fn set_jobs(&mut self, jobs: Vec<EmbeddedJob>) -> Result<(), EmbedError> {
        let mut names: Vec<&str> = jobs.iter().map(|j| j.name.as_str()).collect();
        names.sort_unstable();
        if let Some(twice) = names.windows(2).find(|w| w[0] == w[1]) {
            return Err(EmbedError::DuplicateJob(twice[0].to_string()));
        }
        self.replace(jobs)
    }

    /// The names of the scheduled jobs.
    pub fn jobs(&self) -> Vec<String> {
        self.jobs.iter().map(|j| j.name.clone()).collect()
    }

    fn replace(&mut self, jobs: Vec<EmbeddedJob>) -> Result<(), EmbedError> {
        let config = document(&self.redis, &self.daemon, &jobs)?;
        let request = Reload::Table {
            jobs: config.jobs.into_values().collect(),
            tasks: tasks(&jobs),
        };
        self.reload
            .send(request)
            .map_err(|_| EmbedError::Stopped("the replica is gone".into()))?;
        self.jobs = jobs;
        Ok(())
    }

    /// Resolves once the scheduler claims ticks: it has checked that
    /// Redis cannot evict its keys and that its state directory is usable,
    /// and joined the cluster. [`SchedulerBuilder::start`] returns before
    /// that; a service that must not report itself healthy without its
    /// jobs waits here. An error if the scheduler refused to run
    /// ([`EmbedError::Refused`]) or stopped; at once when it was ready
    /// before.
    ///
    /// ```no_run
    /// # async fn f(cluster: cronlease::Cluster) -> Result<(), cronlease::EmbedError> {
    /// let mut scheduler = cluster.scheduler().start()?;
    /// scheduler.ready().await?;   // e.g. Redis with `maxmemory-policy allkeys-lru`: Refused
    /// # Ok(()) }
    /// ```
    pub async fn ready(&mut self) -> Result<(), EmbedError> {
        let Some(ready) = self.ready.take() else {
            return Ok(());
        };
        if ready.await.is_ok() {
            return Ok(());
        }
        // The replica ended before it was ready: its result says why.
        self.shutdown.cancel();
        match self.replica.take() {
            Some(replica) => match replica.await {
                Ok(Err(e)) => Err(e.into()),
                Ok(Ok(())) => Err(EmbedError::Stopped("before it was ready".into())),
                Err(e) => Err(EmbedError::Stopped(e.to_string())),
            },
            None => Err(EmbedError::Stopped("before it was ready".into())),
        }
    }

    /// Stops claiming, lets runs finish within the shutdown grace (then
    /// stops them), records their outcomes and leaves the cluster.
    pub async fn shutdown(mut self) -> Result<(), EmbedError> {
        self.shutdown.cancel();
        let Some(replica) = self.replica.take() else {
            return Ok(());
        };
        match replica.await {
            Ok(result) => Ok(result?),
            Err(e) => Err(EmbedError::Stopped(e.to_string())),
        }
    }
}

impl Drop for Scheduler {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

/// What a handler is given: which tick it runs, its fence, and the signal
/// to stop.
///
/// ```
/// use cronlease::Run;
///
/// async fn draw(mut run: Run) -> Result<(), String> {
///     tokio::select! {
///         () = std::future::pending::<()>() => Ok(()),   // the work
///         reason = run.stopped() => Err(format!("stopped: {reason:?}")),
///     }
/// }
/// ```
#[derive(Debug)]
pub struct Run {
    context: RunContext,
    stop: StopSignal,
}

impl Run {
    /// The job.
    pub fn job(&self) -> &str {
        &self.context.job
    }

    /// The tick this run is for (UTC).
    pub fn tick(&self) -> DateTime<Utc> {
        DateTime::from_timestamp_millis(self.context.tick_ms).unwrap_or_default()
    }

    /// The tick, ms since the Unix epoch.
    pub fn tick_ms(&self) -> i64 {
        self.context.tick_ms
    }

    /// The fence: higher than every earlier run's of this job. Writes
    /// should carry it, and stores refuse a lower one than they have seen.
    pub fn fence(&self) -> u64 {
        self.context.fence
    }

    /// The run's id, as `history` shows it.
    pub fn run_id(&self) -> &str {
        &self.context.run_id
    }

    /// 1 for the first attempt, 2 for the first retry, …
    pub fn attempt(&self) -> u32 {
        self.context.attempt
    }

    /// The instance running it.
    pub fn replica(&self) -> &str {
        &self.context.replica
    }

    /// Resolves when the run must stop, with the reason: the lease is lost,
    /// the timeout passed, or the scheduler is shutting down. A handler
    /// that goes on is dropped after the scheduler's `kill_grace`.
    pub async fn stopped(&mut self) -> Stop {
        self.stop.next().await
    }
}

/// An async function as a task.
struct Handler<F> {
    handler: F,
}

impl<F, Fut, E> Task for Handler<F>
where
    F: Fn(Run) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), E>> + Send + 'static,
    E: Into<Box<dyn StdError + Send + Sync>> + 'static,
{
    fn attempt<'a>(
        &'a self,
        run: &'a RunContext,
        stop: StopSignal,
        output: &'a mut Tail,
    ) -> Attempt<'a> {
        let handed = Run {
            context: run.clone(),
            stop: stop.clone(),
        };
        let work = (self.handler)(handed);
        Box::pin(supervise(work, stop, run.grace, output))
    }
}

/// Runs a handler's future until it ends; once told to stop, gives it
/// `grace` to end and then drops it.
async fn supervise<Fut, E>(
    work: Fut,
    mut stop: StopSignal,
    grace: Duration,
    output: &mut Tail,
) -> AttemptEnd
where
    Fut: Future<Output = Result<(), E>> + Send,
    E: Into<Box<dyn StdError + Send + Sync>>,
{
    tokio::pin!(work);
    let reason = tokio::select! {
        result = &mut work => match stop.requested() {
            // It ended by itself.
            None => return ended(result, output),
            // It ended because it was told to (it watches the signal too).
            Some(reason) => return stopped(reason, result, output),
        },
        reason = stop.next() => reason,
    };
    match tokio::time::timeout(grace, &mut work).await {
        Ok(result) => return stopped(reason, result, output),
        Err(_) => output.push_line(
            format!(
                "[cronlease] the handler did not stop within {} of being told to ({reason:?}); dropped",
                humantime::format_duration(grace)
            )
            .as_bytes(),
        ),
    }
    AttemptEnd::bare(reason.status())
}

/// A handler that ended after being told to stop: the stop's status, and
/// what it returned in the output.
fn stopped<E>(reason: Stop, result: Result<(), E>, output: &mut Tail) -> AttemptEnd
where
    E: Into<Box<dyn StdError + Send + Sync>>,
{
    let _ = ended(result, output);
    output.push_line(
        format!("[cronlease] the handler ended after being told to stop ({reason:?})").as_bytes(),
    );
    AttemptEnd::bare(reason.status())
}

/// A handler's result as an attempt's end; an error and its sources go to
/// the output.
fn ended<E>(result: Result<(), E>, output: &mut Tail) -> AttemptEnd
where
    E: Into<Box<dyn StdError + Send + Sync>>,
{
    match result {
        Ok(()) => AttemptEnd::bare(Status::Ok),
        Err(e) => {
            let e: Box<dyn StdError + Send + Sync> = e.into();
            output.push_line(format!("error: {e}").as_bytes());
            let mut source = e.source();
            while let Some(cause) = source {
                output.push_line(format!("caused by: {cause}").as_bytes());
                source = cause.source();
            }
            AttemptEnd::bare(Status::Failed)
        }
    }
}
