//! cronlease inside a Rust service: the same exactly-once ticks as the
//! daemon, around an async function.
//!
//! A service deployed as several instances connects each to the same Redis
//! ([`Cluster::connect`]), declares its jobs ([`JobBuilder`](crate::JobBuilder)) and starts a
//! [`Scheduler`](crate::Scheduler). At every tick the instances race for the claim exactly as
//! `cronlease run` replicas do (they are replicas: `cronlease status`,
//! `history`, `trigger`, `pause` and `resume` work on embedded jobs
//! unchanged), the winner calls the job's handler with a [`Run`](crate::Run) under a
//! watchdog-renewed lease, and the outcome goes to the job's stream.
//!
//! The handler gets the tick's fence: a write it makes should carry it, and
//! the store it writes to should refuse a fence lower than one it has seen
//! (a replica that lost its lease without knowing it then cannot overwrite
//! the newer run's work). It also gets a stop signal ([`Run::stopped`](crate::Run::stopped)):
//! when the lease is lost, the job's timeout passes or the scheduler shuts
//! down, the handler should stop; one that goes on is dropped after the
//! scheduler's `kill_grace`, and the outcome says so.
//!
//! ```no_run
//! use std::time::Duration;
//! use cronlease::{Cluster, JobBuilder, RedisSettings, Run};
//!
//! # async fn draw_winners(fence: u64) -> Result<(), std::io::Error> { Ok(()) }
//! # async fn service() -> Result<(), cronlease::SchedulerError> {
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
//!
//! Files: this one the errors, [`RedisSettings`](crate::RedisSettings) and [`Cluster`]; `job.rs`
//! a job's settings and handler; `scheduler.rs` the scheduler, its builder
//! and its life; `run.rs` what a handler is given and how its future is
//! run, stopped and dropped.

use std::error::Error as StdError;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::config::{
    self, Config, ConfigError, JobContext, Problem, RedisConfig, Source, validate_specs,
};
use crate::daemon::DaemonError;
use crate::lock::keeper::Keeper;
use crate::store::{Store, StoreError};

mod job;
#[cfg(feature = "notify")]
mod notify;
mod run;
mod scheduler;

pub use job::{Job, JobBuilder, ParamSpec};
pub use run::{Run, RunOutput};
pub use scheduler::{Scheduler, SchedulerBuilder};

/// The name the embedded configuration's problems are reported under.
const SOURCE: &str = "<embedded scheduler>";

/// Why connecting, starting a scheduler or changing its jobs failed.
///
/// [`Cluster::connect`] returns `Config` or `Redis`;
/// [`SchedulerBuilder::start`](crate::SchedulerBuilder::start) returns `Config`; [`Scheduler::add`](crate::Scheduler::add),
/// [`Scheduler::remove`](crate::Scheduler::remove) and [`Scheduler::set_jobs`](crate::Scheduler::set_jobs) return `Config`,
/// `JobExists`, `NoSuchJob`, `DuplicateJob` or `Stopped`;
/// [`Scheduler::shutdown`](crate::Scheduler::shutdown) returns `Refused` or `Stopped`. Once a
/// scheduler runs, Redis trouble is not an error: the engine retries,
/// stops runs whose lease it cannot prove and spools outcomes until Redis
/// is back.
///
/// Settings are checked before anything connects, so this runs without a
/// Redis:
///
/// ```
/// use cronlease::{Cluster, RedisSettings, SchedulerError};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let settings = RedisSettings::url("redis://127.0.0.1:6379/0").key_prefix("{shop}");
/// let Err(SchedulerError::Config(error)) = Cluster::connect(settings).await else {
///     panic!("a prefix with braces is refused");
/// };
/// for problem in &error.problems {
///     eprintln!("{}: {}", problem.field.as_deref().unwrap_or("-"), problem.message);
/// }
/// assert_eq!(error.problems[0].field.as_deref(), Some("key_prefix"));
/// # }
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SchedulerError {
    /// A setting or a job is not valid: every problem found, as `cronlease
    /// check` words it (with no line numbers: the field names the place).
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// [`Cluster::connect`] could not reach Redis (with `quorum`: a
    /// majority of the masters), or Redis did not answer as expected.
    #[error(transparent)]
    Redis(#[from] ConnectionError),
    /// The scheduler refused to run: Redis may evict keys (`maxmemory`
    /// with a policy other than `noeviction`: a lease could vanish and a
    /// tick run twice), or its state directory cannot be created. Found by
    /// the replica's task after [`SchedulerBuilder::start`](crate::SchedulerBuilder::start) returned, and
    /// returned by [`Scheduler::ready`](crate::Scheduler::ready) or [`Scheduler::shutdown`](crate::Scheduler::shutdown).
    #[error(transparent)]
    Refused(RefusedError),
    /// [`Scheduler::add`](crate::Scheduler::add) of a job whose name is taken.
    #[error("a job named {0:?} is already scheduled")]
    JobExists(String),
    /// [`Scheduler::remove`](crate::Scheduler::remove) of a job that is not scheduled.
    #[error("no job named {0:?} is scheduled")]
    NoSuchJob(String),
    /// [`SchedulerBuilder::start`](crate::SchedulerBuilder::start) or [`Scheduler::set_jobs`](crate::Scheduler::set_jobs) with two jobs
    /// of the same name.
    #[error("two jobs are named {0:?}")]
    DuplicateJob(String),
    /// [`Scheduler::trigger`](crate::Scheduler::trigger) with parameters
    /// that do not fit the job's: nothing was queued.
    #[error("job {job:?}: {error}")]
    Params {
        /// The job.
        job: String,
        /// What does not fit.
        #[source]
        error: crate::ParamError,
    },
    /// [`Scheduler::trigger`](crate::Scheduler::trigger) of a paused job
    /// (`cronlease pause`), or while the cluster is paused (`cronlease
    /// pause --all`): nothing was queued.
    #[error("job {0:?} is paused (or the cluster is)")]
    Paused(String),
    /// The scheduler's task is gone: it refused to run (then
    /// [`Scheduler::ready`](crate::Scheduler::ready) and [`Scheduler::shutdown`](crate::Scheduler::shutdown) say why), panicked,
    /// or its runtime shut down.
    #[error("the scheduler stopped by itself: {0}")]
    Stopped(String),
}

impl From<StoreError> for SchedulerError {
    fn from(error: StoreError) -> SchedulerError {
        SchedulerError::Redis(ConnectionError(error))
    }
}

impl From<DaemonError> for SchedulerError {
    fn from(error: DaemonError) -> SchedulerError {
        SchedulerError::Refused(RefusedError(error))
    }
}

/// Redis could not be reached, or did not do what was asked.
///
/// Which server, what was asked and what came back are in the message
/// (passwords redacted). Opaque: print it, or walk its
/// [`source`](std::error::Error::source) chain.
///
/// ```
/// use std::time::Duration;
/// use cronlease::{Cluster, RedisSettings, SchedulerError};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let settings = RedisSettings::url("unix:///nonexistent/redis.sock")
///     .connect_timeout(Duration::from_millis(200));
/// let Err(SchedulerError::Redis(error)) = Cluster::connect(settings).await else {
///     panic!("there is no Redis there");
/// };
/// eprintln!("no Redis today: {error}");
/// # }
/// ```
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct ConnectionError(StoreError);

impl From<StoreError> for ConnectionError {
    fn from(error: StoreError) -> ConnectionError {
        ConnectionError(error)
    }
}

/// Why a scheduler refused to run (see [`SchedulerError::Refused`](crate::SchedulerError::Refused)): Redis
/// may evict keys, or the state directory cannot be created. The message
/// says what to change.
///
/// ```no_run
/// # async fn f(cluster: cronlease::Cluster) -> Result<(), cronlease::SchedulerError> {
/// match cluster.scheduler().start()?.shutdown().await {
///     Err(cronlease::SchedulerError::Refused(why)) => eprintln!("fix Redis or the state directory: {why}"),
///     other => other?,
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct RefusedError(DaemonError);

/// How to reach Redis: the `[redis]` section of a job table, as code.
///
/// Nothing is checked until [`Cluster::connect`], which reports every
/// invalid setting at once as [`SchedulerError::Config`](crate::SchedulerError::Config). Durations are taken
/// in whole milliseconds; zero is not valid. A password goes in the URL
/// (`redis://user:password@host`); it is never printed. Sentinel, Redis
/// Cluster, a CA file and `min_replicas_ack` are the daemon's only.
///
/// ```
/// use std::time::Duration;
/// use cronlease::RedisSettings;
///
/// let settings = RedisSettings::url("rediss://cronlease:secret@redis.internal:6379/0")
///     .key_prefix("shop")
///     .connect_timeout(Duration::from_secs(3))
///     .command_timeout(Duration::from_millis(500));
/// ```
#[derive(Debug, Clone)]
pub struct RedisSettings {
    table: toml::Table,
}

impl RedisSettings {
    /// One Redis server (or one endpoint in front of several), as
    /// `[redis] url`: `redis://[user:password@]host[:port][/db]`,
    /// `rediss://` for TLS (the system's roots), or `unix:///path`.
    ///
    /// ```
    /// let settings = cronlease::RedisSettings::url("unix:///run/redis/redis.sock");
    /// ```
    pub fn url(url: &str) -> RedisSettings {
        let mut table = toml::Table::new();
        table.insert("url".into(), url.into());
        RedisSettings { table }
    }

    /// Independent masters (at least 3, each listed once), as `[redis]
    /// quorum`: a tick's claim and a lock hold only with a majority of them.
    /// `redis://` or `rediss://` URLs. With a quorum, `cronlease trigger`
    /// is not available and [`OnHolderLost::Rerun`](crate::OnHolderLost::Rerun) is refused.
    ///
    /// ```
    /// let settings = cronlease::RedisSettings::quorum(&[
    ///     "redis://10.0.0.1:6379",
    ///     "redis://10.0.0.2:6379",
    ///     "redis://10.0.0.3:6379",
    /// ]);
    /// ```
    pub fn quorum(urls: &[&str]) -> RedisSettings {
        let mut table = toml::Table::new();
        let urls = urls.iter().map(|u| toml::Value::from(*u)).collect();
        table.insert("quorum".into(), toml::Value::Array(urls));
        RedisSettings { table }
    }

    /// The first part of every key (`[redis] key_prefix`, default
    /// `cronlease`): 1 to 64 characters from `A-Z a-z 0-9 _ . - :`. Every
    /// instance running the same jobs, and `cronlease status --prefix`,
    /// must use the same one; different prefixes let several clusters
    /// share one Redis.
    ///
    /// ```
    /// let settings = cronlease::RedisSettings::url("redis://127.0.0.1:6379/0").key_prefix("shop");
    /// ```
    pub fn key_prefix(self, prefix: &str) -> RedisSettings {
        self.set("key_prefix", prefix.into())
    }

    /// How long one command may take before its reply counts as lost
    /// (`[redis] command_timeout`, default 2 s, at most 5 min). A
    /// scheduler's lease must exceed three times it.
    ///
    /// ```
    /// use std::time::Duration;
    /// let settings = cronlease::RedisSettings::url("redis://127.0.0.1:6379/0")
    ///     .command_timeout(Duration::from_millis(500));
    /// ```
    pub fn command_timeout(self, timeout: Duration) -> RedisSettings {
        self.set("command_timeout", duration(timeout))
    }

    /// How long to wait for a connection (`[redis] connect_timeout`,
    /// default 5 s, at most 5 min). [`Cluster::connect`] gives up after it
    /// plus the command timeout.
    ///
    /// ```
    /// use std::time::Duration;
    /// let settings = cronlease::RedisSettings::url("redis://127.0.0.1:6379/0")
    ///     .connect_timeout(Duration::from_secs(1));
    /// ```
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

/// A connection to the Redis the instances share: where schedulers
/// ([`Cluster::scheduler`]) and locks ([`Cluster::lock`]) come from.
///
/// Clones share the connection, which reconnects by itself after Redis
/// trouble.
///
/// ```no_run
/// use cronlease::{Cluster, RedisSettings};
///
/// # async fn f() -> Result<(), Box<dyn std::error::Error>> {
/// let cluster = Cluster::connect(RedisSettings::url("redis://127.0.0.1:6379/0").key_prefix("shop")).await?;
/// if let Some(guard) = cluster.lock("report").try_acquire().await? {
///     // … only one instance is here …
///     guard.release().await?;
/// }
/// let scheduler = cluster.scheduler().start()?;
/// // … serve …
/// scheduler.shutdown().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Cluster {
    redis: toml::Table,
    /// The same settings, validated: what a scheduler's jobs are checked
    /// against (a quorum rules out reruns).
    redis_config: RedisConfig,
    store: Store,
    /// Renews the leases of every lock taken through this cluster (and
    /// its clones): one task for all of them.
    keeper: Keeper,
    /// This process as a lock holder (`<host>-<pid>`), and its host,
    /// encoded once for every lock's record.
    holder: std::sync::Arc<crate::store::LockHolderTag>,
}

impl Cluster {
    /// Checks the settings, connects and asks Redis the time. Errors:
    /// [`SchedulerError::Config`](crate::SchedulerError::Config) with every invalid setting (before any
    /// connection is tried), [`SchedulerError::Redis`](crate::SchedulerError::Redis) if Redis (with `quorum`:
    /// a majority of the masters) does not answer within the connect
    /// timeout plus the command timeout. Unlike the daemon, it does not
    /// wait for Redis to come back: retrying is the caller's choice.
    ///
    /// ```no_run
    /// # async fn f() -> Result<(), cronlease::SchedulerError> {
    /// use cronlease::{Cluster, RedisSettings};
    /// let cluster = Cluster::connect(RedisSettings::url("redis://127.0.0.1:6379/0")).await?;
    /// # Ok(()) }
    /// ```
    pub async fn connect(settings: RedisSettings) -> Result<Cluster, SchedulerError> {
        let none = toml::Table::new();
        let config = embedded_settings(&settings.table, &none, &none)?;
        let store = Store::connect(&config.redis).await?;
        let keeper = Keeper::new(store.clone());
        // Asks Redis the time: the offset dates the locks' records.
        keeper.sync_clock().await?;
        let identity = crate::daemon::Identity::new(None);
        Ok(Cluster {
            redis: settings.table,
            redis_config: config.redis,
            keeper,
            store,
            holder: std::sync::Arc::new(crate::store::LockHolderTag::new(
                &format!("{}-{}", identity.host, identity.pid),
                &identity.host,
            )),
        })
    }

    /// The cluster-wide lock `name` (a [`LockBuilder`](crate::LockBuilder)):
    /// set its lease, holder or owner, then acquire it. Nothing is sent to
    /// Redis until then. The name is not checked: keep to job-name
    /// characters (`A-Z a-z 0-9 _ . -`), since it becomes part of Redis
    /// keys and a brace would break their hash tag. A lock's lease lives as
    /// long as it is held; its fence is forgotten 30 days after it was
    /// first needed (the next one is then still higher).
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
        crate::lock::LockBuilder::new(self.keeper.clone(), name, self.holder.clone())
    }

    /// A scheduler to declare jobs on, then [`SchedulerBuilder::start`](crate::SchedulerBuilder::start).
    /// It serves no metrics and no dashboard (the daemon's
    /// `metrics_listen` and `dashboard_listen` are off); metric values
    /// are recorded through the `metrics` facade for whatever recorder the
    /// service installs.
    ///
    /// ```no_run
    /// # async fn f(cluster: cronlease::Cluster) -> Result<(), cronlease::SchedulerError> {
    /// use cronlease::{JobBuilder, Run};
    ///
    /// let scheduler = cluster
    ///     .scheduler()
    ///     .job(JobBuilder::new("prune-carts", "*/10 * * * *").run(|_run: Run| async {
    ///         Ok::<(), std::io::Error>(())
    ///     }))
    ///     .start()?;
    /// # Ok(()) }
    /// ```
    pub fn scheduler(&self) -> SchedulerBuilder {
        let mut daemon = toml::Table::new();
        // An embedding service serves its own metrics and pages, if any.
        daemon.insert("metrics_listen".into(), "".into());
        daemon.insert("dashboard_listen".into(), "".into());
        SchedulerBuilder {
            cluster: self.clone(),
            daemon,
            jobs: Vec::new(),
            #[cfg(feature = "notify")]
            channels: Vec::new(),
        }
    }
}

/// The validated configuration of the `[redis]`, `[daemon]` and
/// `[notify.<name>]` tables given, without jobs.
fn embedded_settings(
    redis: &toml::Table,
    daemon: &toml::Table,
    notify: &toml::Table,
) -> Result<Config, ConfigError> {
    let mut root = toml::Table::new();
    root.insert("redis".into(), redis.clone().into());
    root.insert("daemon".into(), daemon.clone().into());
    if !notify.is_empty() {
        root.insert("notify".into(), notify.clone().into());
    }
    let text = toml::to_string(&root).unwrap_or_default();
    Config::parse_with(&text, Path::new(SOURCE), Source::Embedded).map_err(|mut error| {
        // Lines of a document the caller never saw mean nothing: the
        // section and field name the place.
        for problem in &mut error.problems {
            problem.line_col = None;
        }
        error
    })
}

/// What a scheduler's jobs are checked against: its cluster's Redis
/// settings, and where a job table at [`SOURCE`] would be (its jobs'
/// working directory, which their definition hashes include).
fn job_context(redis: &RedisConfig) -> JobContext {
    JobContext::new(Some(redis), None, Path::new(SOURCE), Source::Embedded)
}

/// `jobs` validated one by one against `context`, then their chains
/// among them and the table's other jobs (`other` says which names are),
/// in the order given; or every problem of those that are not valid.
fn validate_jobs(
    jobs: &[Job],
    other: &dyn Fn(&str) -> bool,
    context: &JobContext,
) -> Result<Vec<config::Job>, ConfigError> {
    let (valid, mut problems) =
        validate_specs(jobs.iter().map(|j| (j.name.as_str(), &j.spec)), context);
    let (valid, chain_problems) = config::check_given_chains(valid, other);
    problems.extend(chain_problems);
    if problems.is_empty() {
        Ok(valid)
    } else {
        Err(config_error(Vec::new(), problems))
    }
}

/// An embedded scheduler's problems: those of its settings, then its jobs'
/// by job name and, within a job, its own first, then by field, as the
/// daemon's `check` would list them from a table written in that order.
fn config_error(mut problems: Vec<Problem>, mut job_problems: Vec<Problem>) -> ConfigError {
    job_problems.sort_by(|a, b| {
        let place = |p: &Problem| (p.section.clone(), p.field.clone());
        place(a).cmp(&place(b))
    });
    problems.append(&mut job_problems);
    ConfigError {
        file: PathBuf::from(SOURCE),
        problems,
    }
}

// Debug shows what identifies each value; never the Redis settings, whose
// URL may hold a password.
impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field("holder", &self.holder.holder())
            .field("host", &self.holder.host())
            .finish_non_exhaustive()
    }
}
