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

/// Why connecting, starting a scheduler or changing its jobs failed.
///
/// [`Cluster::connect`] returns `Config` or `Redis`;
/// [`SchedulerBuilder::start`] returns `Config`; [`Scheduler::add`],
/// [`Scheduler::remove`] and [`Scheduler::set_jobs`] return `Config`,
/// `JobExists`, `NoSuchJob`, `DuplicateJob` or `Stopped`;
/// [`Scheduler::shutdown`] returns `Refused` or `Stopped`. Once a
/// scheduler runs, Redis trouble is not an error: the engine retries,
/// stops runs whose lease it cannot prove and spools outcomes until Redis
/// is back.
///
/// Settings are checked before anything connects, so this runs without a
/// Redis:
///
/// ```
/// use cronlease::{Cluster, EmbedError, RedisSettings};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let settings = RedisSettings::url("redis://127.0.0.1:6379/0").key_prefix("{shop}");
/// let Err(EmbedError::Config(error)) = Cluster::connect(settings).await else {
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
pub enum EmbedError {
    /// A setting or a job is not valid: every problem found, as `cronlease
    /// check` words it (with no line numbers: the field names the place).
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// [`Cluster::connect`] could not reach Redis (with `quorum`: a
    /// majority of the masters), or Redis did not answer as expected.
    #[error(transparent)]
    Redis(#[from] RedisError),
    /// The scheduler refused to run: Redis may evict keys (`maxmemory`
    /// with a policy other than `noeviction`: a lease could vanish and a
    /// tick run twice), or its state directory cannot be created. Found by
    /// the replica's task after [`SchedulerBuilder::start`] returned, and
    /// returned by [`Scheduler::ready`] or [`Scheduler::shutdown`].
    #[error(transparent)]
    Refused(RefusedError),
    /// [`Scheduler::add`] of a job whose name is taken.
    #[error("a job named {0:?} is already scheduled")]
    JobExists(String),
    /// [`Scheduler::remove`] of a job that is not scheduled.
    #[error("no job named {0:?} is scheduled")]
    NoSuchJob(String),
    /// [`SchedulerBuilder::start`] or [`Scheduler::set_jobs`] with two jobs
    /// of the same name.
    #[error("two jobs are named {0:?}")]
    DuplicateJob(String),
    /// The scheduler's task is gone: it refused to run (then
    /// [`Scheduler::ready`] and [`Scheduler::shutdown`] say why), panicked,
    /// or its runtime shut down.
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

/// Redis could not be reached, or did not do what was asked.
///
/// Which server, what was asked and what came back are in the message
/// (passwords redacted). Opaque: print it, or walk its
/// [`source`](std::error::Error::source) chain.
///
/// ```
/// use std::time::Duration;
/// use cronlease::{Cluster, EmbedError, RedisSettings};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let settings = RedisSettings::url("unix:///nonexistent/redis.sock")
///     .connect_timeout(Duration::from_millis(200));
/// let Err(EmbedError::Redis(error)) = Cluster::connect(settings).await else {
///     panic!("there is no Redis there");
/// };
/// eprintln!("no Redis today: {error}");
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

/// Why a scheduler refused to run (see [`EmbedError::Refused`]): Redis
/// may evict keys, or the state directory cannot be created. The message
/// says what to change.
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
/// Nothing is checked until [`Cluster::connect`], which reports every
/// invalid setting at once as [`EmbedError::Config`]. Durations are taken
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
    /// is not available and [`OnHolderLost::Rerun`] is refused.
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
    store: Store,
    /// This process as a lock holder (`<host>-<pid>`), and its host.
    holder: String,
    host: String,
}

impl Cluster {
    /// Checks the settings, connects and asks Redis the time. Errors:
    /// [`EmbedError::Config`] with every invalid setting (before any
    /// connection is tried), [`EmbedError::Redis`] if Redis (with `quorum`:
    /// a majority of the masters) does not answer within the connect
    /// timeout plus the command timeout. Unlike the daemon, it does not
    /// wait for Redis to come back: retrying is the caller's choice.
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

    /// The cluster-wide lock `name` (a [`LockBuilder`](crate::LockBuilder)):
    /// set its lease, holder or owner, then acquire it. Nothing is sent to
    /// Redis until then. The name is not checked: keep to job-name
    /// characters (`A-Z a-z 0-9 _ . -`), since it becomes part of Redis
    /// keys and a brace would break their hash tag. A lock's keys expire 30
    /// days after its last acquisition.
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
    /// It serves no metrics (the daemon's `metrics_listen` is off); values
    /// are recorded through the `metrics` facade for whatever recorder the
    /// service installs.
    ///
    /// ```no_run
    /// # async fn f(cluster: cronlease::Cluster) -> Result<(), cronlease::EmbedError> {
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
/// the settings of a `[jobs.<name>]` table.
///
/// It has every setting of the table but `command`, `shell`, `workdir` and
/// `env`: the handler is the work. Nothing is checked here:
/// [`SchedulerBuilder::start`], [`Scheduler::add`] and
/// [`Scheduler::set_jobs`] check every job with the job table's
/// validators and return every problem as [`EmbedError::Config`].
/// Durations are taken in whole milliseconds; zero is not valid.
///
/// Every instance must declare a job with the same settings: `cronlease
/// status` reports instances whose definitions differ.
///
/// ```
/// use std::time::Duration;
/// use cronlease::{JobBuilder, Misfire, Overlap, Run};
///
/// let job = JobBuilder::new("lottery-draw", "0 12 * * *")
///     .timezone("Asia/Shanghai")
///     .overlap(Overlap::Skip)
///     .misfire(Misfire::RunOnce)
///     .timeout(Duration::from_secs(300))
///     .retries(2)
///     .run(|run: Run| async move {
///         println!("drawing for {} with fence {}", run.tick(), run.fence());
///         Ok::<(), std::io::Error>(())
///     });
/// assert_eq!(job.name(), "lottery-draw");
/// ```
#[derive(Debug, Clone)]
pub struct JobBuilder {
    name: String,
    table: toml::Table,
}

impl JobBuilder {
    /// A job named `name` on the cron expression `schedule`, read in UTC
    /// unless [`JobBuilder::timezone`] says otherwise. The name is 1 to 128
    /// characters from `A-Z a-z 0-9 _ . -` (it is part of Redis keys). The
    /// schedule is read as cronie reads a crontab: 5 fields (minute, hour,
    /// day of month, month, day of week), 6 with leading seconds, 7 with
    /// seconds and a trailing year; or `@yearly`, `@monthly`, `@weekly`,
    /// `@daily`, `@hourly`; `H` picks a value by a hash of the job's name
    /// (the same on every instance). `@reboot` is refused. The README's
    /// "Schedules" section has the details.
    ///
    /// ```
    /// use cronlease::JobBuilder;
    ///
    /// let every_quarter_hour = JobBuilder::new("sync-stock", "*/15 * * * *");
    /// let nightly_spread = JobBuilder::new("reindex", "H H(1-4) * * *");
    /// let at_seconds = JobBuilder::new("ping", "30 * * * * *");
    /// ```
    pub fn new(name: &str, schedule: &str) -> JobBuilder {
        let mut table = toml::Table::new();
        table.insert("schedule".into(), schedule.into());
        JobBuilder {
            name: name.to_string(),
            table,
        }
    }

    /// The IANA time zone the schedule is read in (`timezone`, default
    /// UTC), in any letter case; a typo gets the nearest name suggested.
    /// The tz database is compiled in, so every instance of one release
    /// computes the same instants.
    ///
    /// ```
    /// let job = cronlease::JobBuilder::new("lottery-draw", "0 12 * * *").timezone("Asia/Shanghai");
    /// ```
    pub fn timezone(self, zone: &str) -> JobBuilder {
        self.set("timezone", zone.into())
    }

    /// What a tick does while a run of the job is in flight (`overlap`,
    /// default [`Overlap::Skip`]).
    ///
    /// ```
    /// use cronlease::{JobBuilder, Overlap};
    /// let job = JobBuilder::new("export", "*/5 * * * *").overlap(Overlap::Replace);
    /// ```
    pub fn overlap(self, overlap: Overlap) -> JobBuilder {
        self.set("overlap", overlap.as_str().into())
    }

    /// What becomes of ticks missed while no instance could claim them
    /// (`misfire`, default [`Misfire::RunOnce`]).
    ///
    /// ```
    /// use cronlease::{JobBuilder, Misfire};
    /// let job = JobBuilder::new("invoice", "0 * * * *").misfire(Misfire::RunAll);
    /// ```
    pub fn misfire(self, misfire: Misfire) -> JobBuilder {
        self.set("misfire", misfire.as_str().into())
    }

    /// How old a missed tick may be and still run after an outage
    /// (`misfire_grace`, default 5 min, at most 7 days).
    ///
    /// ```
    /// use std::time::Duration;
    /// let job = cronlease::JobBuilder::new("invoice", "0 * * * *").misfire_grace(Duration::from_secs(3600));
    /// ```
    pub fn misfire_grace(self, grace: Duration) -> JobBuilder {
        self.set("misfire_grace", duration(grace))
    }

    /// How long one attempt may run (`timeout`, default none, at most 7
    /// days). Then [`Run::stopped`] resolves with [`Stop::Timeout`], the
    /// handler has the scheduler's `kill_grace` to end and is dropped
    /// after it; the attempt is `timeout`, and retried if retries are
    /// left.
    ///
    /// ```
    /// use std::time::Duration;
    /// let job = cronlease::JobBuilder::new("report", "0 6 * * *").timeout(Duration::from_secs(600));
    /// ```
    pub fn timeout(self, timeout: Duration) -> JobBuilder {
        self.set("timeout", duration(timeout))
    }

    /// Extra attempts after a failed or timed-out one, under the same
    /// claim and fence (`retries`, default 0, at most 100).
    /// [`Run::attempt`] counts them.
    ///
    /// ```
    /// let job = cronlease::JobBuilder::new("report", "0 6 * * *").retries(3);
    /// ```
    pub fn retries(self, retries: u32) -> JobBuilder {
        self.set("retries", i64::from(retries).into())
    }

    /// The wait between attempts (`retry_backoff`, default 10 s, at most
    /// 1 h); the lease is renewed meanwhile.
    ///
    /// ```
    /// use std::time::Duration;
    /// let job = cronlease::JobBuilder::new("report", "0 6 * * *")
    ///     .retries(3)
    ///     .retry_backoff(Duration::from_secs(30));
    /// ```
    pub fn retry_backoff(self, backoff: Duration) -> JobBuilder {
        self.set("retry_backoff", duration(backoff))
    }

    /// What a local time that a daylight-saving change skips does
    /// (`dst_gap`, default [`DstGap::RunAfter`]). Only for fixed-time
    /// schedules (neither minute nor hour starts with `*`); on any other
    /// it is a config error.
    ///
    /// ```
    /// use cronlease::{DstGap, JobBuilder};
    /// let job = JobBuilder::new("close-day", "30 2 * * *")
    ///     .timezone("Europe/Berlin")
    ///     .dst_gap(DstGap::Skip);
    /// ```
    pub fn dst_gap(self, policy: DstGap) -> JobBuilder {
        self.set("dst_gap", policy.as_str().into())
    }

    /// What a local time that a daylight-saving change repeats does
    /// (`dst_repeat`, default [`DstRepeat::First`]). Only for fixed-time
    /// schedules, like [`JobBuilder::dst_gap`].
    ///
    /// ```
    /// use cronlease::{DstRepeat, JobBuilder};
    /// let job = JobBuilder::new("meter-reading", "30 1 * * *")
    ///     .timezone("America/New_York")
    ///     .dst_repeat(DstRepeat::Both);
    /// ```
    pub fn dst_repeat(self, policy: DstRepeat) -> JobBuilder {
        self.set("dst_repeat", policy.as_str().into())
    }

    /// What becomes of a run whose instance died before recording an
    /// outcome (`on_holder_lost`, default [`OnHolderLost::Record`]).
    /// [`OnHolderLost::Rerun`] is refused with [`RedisSettings::quorum`].
    ///
    /// ```
    /// use cronlease::{JobBuilder, OnHolderLost};
    /// let job = JobBuilder::new("settle", "0 3 * * *").on_holder_lost(OnHolderLost::Rerun);
    /// ```
    pub fn on_holder_lost(self, policy: OnHolderLost) -> JobBuilder {
        self.set("on_holder_lost", policy.as_str().into())
    }

    /// The job with its handler: an async function of the [`Run`] that
    /// returns `Ok(())` (the attempt is `ok`) or an error (`failed`, with
    /// the error and its sources in the outcome's output, as `cronlease
    /// history --output` shows it). A panic is `failed` with its message,
    /// and the scheduler goes on. The handler is called once per attempt,
    /// on the scheduler's runtime; it should watch [`Run::stopped`].
    ///
    /// ```
    /// use cronlease::{JobBuilder, Run};
    ///
    /// async fn draw(run: Run) -> Result<(), std::io::Error> {
    ///     if run.attempt() == 1 {
    ///         return Err(std::io::Error::other("the ticket service is down"));
    ///     }
    ///     Ok(())
    /// }
    ///
    /// let job = JobBuilder::new("lottery-draw", "0 12 * * *").retries(1).run(draw);
    /// assert_eq!(job.name(), "lottery-draw");
    /// ```
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

/// A job with its handler ([`JobBuilder::run`]), ready for
/// [`SchedulerBuilder::job`], [`Scheduler::add`] or [`Scheduler::set_jobs`].
/// Cheap to clone: clones share the handler.
///
/// ```
/// use cronlease::{EmbeddedJob, JobBuilder, Run};
///
/// fn jobs() -> Vec<EmbeddedJob> {
///     ["eu", "us"]
///         .iter()
///         .map(|region| {
///             JobBuilder::new(&format!("report-{region}"), "0 6 * * *")
///                 .run(|_run: Run| async { Ok::<(), std::io::Error>(()) })
///         })
///         .collect()
/// }
/// assert_eq!(jobs()[1].name(), "report-us");
/// ```
#[derive(Clone)]
pub struct EmbeddedJob {
    name: String,
    table: toml::Table,
    handler: Arc<dyn Task>,
}

impl EmbeddedJob {
    /// The job's name, as given to [`JobBuilder::new`].
    ///
    /// ```
    /// use cronlease::{JobBuilder, Run};
    /// let job = JobBuilder::new("report", "@daily").run(|_run: Run| async { Ok::<(), std::io::Error>(()) });
    /// assert_eq!(job.name(), "report");
    /// ```
    pub fn name(&self) -> &str {
        &self.name
    }
}

/// The jobs of a scheduler not started yet, and its replica settings: the
/// `[daemon]` section of a job table, as code.
///
/// From [`Cluster::scheduler`]. Nothing is checked until
/// [`SchedulerBuilder::start`], which reports every invalid setting and
/// job at once. Durations are taken in whole milliseconds; zero is not
/// valid.
///
/// ```no_run
/// use std::path::Path;
/// use std::time::Duration;
/// use cronlease::{JobBuilder, Run};
///
/// # async fn f(cluster: cronlease::Cluster) -> Result<(), cronlease::EmbedError> {
/// let scheduler = cluster
///     .scheduler()
///     .replica_id("shop-1")
///     .state_dir(Path::new("/var/lib/shop/cronlease"))
///     .lease(Duration::from_secs(20))
///     .shutdown_grace(Duration::from_secs(10))
///     .job(JobBuilder::new("prune-carts", "*/10 * * * *").run(|_run: Run| async {
///         Ok::<(), std::io::Error>(())
///     }))
///     .start()?;
/// # Ok(()) }
/// ```
pub struct SchedulerBuilder {
    cluster: Cluster,
    daemon: toml::Table,
    jobs: Vec<EmbeddedJob>,
}

impl SchedulerBuilder {
    /// Adds a job. Each needs its own name: [`SchedulerBuilder::start`]
    /// refuses two of the same name ([`EmbedError::DuplicateJob`]).
    ///
    /// ```no_run
    /// use cronlease::{JobBuilder, Run};
    /// # async fn f(cluster: cronlease::Cluster) -> Result<(), cronlease::EmbedError> {
    /// let scheduler = cluster
    ///     .scheduler()
    ///     .job(JobBuilder::new("a", "@hourly").run(|_run: Run| async { Ok::<(), std::io::Error>(()) }))
    ///     .job(JobBuilder::new("b", "@daily").run(|_run: Run| async { Ok::<(), std::io::Error>(()) }))
    ///     .start()?;
    /// # Ok(()) }
    /// ```
    pub fn job(mut self, job: EmbeddedJob) -> SchedulerBuilder {
        self.jobs.push(job);
        self
    }

    /// This instance's name in `cronlease status`, in outcomes and in
    /// [`Run::replica`] (`replica_id`, default `<host>-<pid>-<4 hex>`): 1
    /// to 128 characters from `A-Z a-z 0-9 _ . -`, different on every
    /// instance.
    ///
    /// ```no_run
    /// # async fn f(cluster: cronlease::Cluster) -> Result<(), cronlease::EmbedError> {
    /// let scheduler = cluster.scheduler().replica_id("shop-1").start()?;
    /// # Ok(()) }
    /// ```
    pub fn replica_id(self, id: &str) -> SchedulerBuilder {
        self.set("replica_id", id.into())
    }

    /// Where outcomes that Redis could not take wait until it is back, in
    /// `<dir>/spool` (`state_dir`; default `$STATE_DIRECTORY`, else
    /// `/var/lib/cronlease`); one per instance. The directory is created
    /// when the scheduler starts: if that fails, the scheduler refuses to
    /// run ([`EmbedError::Refused`]). A service not running as root
    /// usually needs to set it.
    ///
    /// ```no_run
    /// use std::path::Path;
    /// # async fn f(cluster: cronlease::Cluster) -> Result<(), cronlease::EmbedError> {
    /// let scheduler = cluster.scheduler().state_dir(Path::new("/var/lib/shop/cronlease")).start()?;
    /// # Ok(()) }
    /// ```
    pub fn state_dir(self, dir: &Path) -> SchedulerBuilder {
        self.set("state_dir", dir.to_string_lossy().into_owned().into())
    }

    /// How long a run's claim holds without renewal (`lease`, default
    /// 30 s, from 1 s to 1 h, and more than three times the Redis command
    /// timeout). Renewed every third of it; a run whose lease cannot be
    /// proven is stopped with [`Stop::LostLease`]. Longer: fewer renewals,
    /// but a dead instance's run is noticed later.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// # async fn f(cluster: cronlease::Cluster) -> Result<(), cronlease::EmbedError> {
    /// let scheduler = cluster.scheduler().lease(Duration::from_secs(60)).start()?;
    /// # Ok(()) }
    /// ```
    pub fn lease(self, lease: Duration) -> SchedulerBuilder {
        self.set("lease", duration(lease))
    }

    /// How often this instance announces itself to the others and to
    /// `cronlease status` (`heartbeat`, default 5 s, at most 5 min).
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// # async fn f(cluster: cronlease::Cluster) -> Result<(), cronlease::EmbedError> {
    /// let scheduler = cluster.scheduler().heartbeat(Duration::from_secs(10)).start()?;
    /// # Ok(()) }
    /// ```
    pub fn heartbeat(self, period: Duration) -> SchedulerBuilder {
        self.set("heartbeat", duration(period))
    }

    /// How long [`Scheduler::shutdown`] lets runs in flight finish before
    /// telling them to stop with [`Stop::Shutdown`] (`shutdown_grace`,
    /// default 30 s, at most 1 h).
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// # async fn f(cluster: cronlease::Cluster) -> Result<(), cronlease::EmbedError> {
    /// let scheduler = cluster.scheduler().shutdown_grace(Duration::from_secs(5)).start()?;
    /// # Ok(()) }
    /// ```
    pub fn shutdown_grace(self, grace: Duration) -> SchedulerBuilder {
        self.set("shutdown_grace", duration(grace))
    }

    /// About how many outcomes Redis keeps per job (`history`, default
    /// 1000, from 1 to 1,000,000).
    ///
    /// ```no_run
    /// # async fn f(cluster: cronlease::Cluster) -> Result<(), cronlease::EmbedError> {
    /// let scheduler = cluster.scheduler().history(100).start()?;
    /// # Ok(()) }
    /// ```
    pub fn history(self, outcomes: u32) -> SchedulerBuilder {
        self.set("history", i64::from(outcomes).into())
    }

    /// How long a handler told to stop ([`Run::stopped`]) may go on before
    /// it is dropped (`kill_grace`, default 10 s, at most 1 h); the
    /// outcome's output then says it was dropped.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// # async fn f(cluster: cronlease::Cluster) -> Result<(), cronlease::EmbedError> {
    /// let scheduler = cluster.scheduler().kill_grace(Duration::from_secs(2)).start()?;
    /// # Ok(()) }
    /// ```
    pub fn kill_grace(self, grace: Duration) -> SchedulerBuilder {
        self.set("kill_grace", duration(grace))
    }

    fn set(mut self, key: &str, value: toml::Value) -> SchedulerBuilder {
        self.daemon.insert(key.into(), value);
        self
    }

    /// Checks every job and setting, returning every problem at once as
    /// [`EmbedError::Config`], and starts the replica as a task on the
    /// current tokio runtime (it panics outside one). A scheduler with no
    /// jobs is valid: it joins the cluster and takes jobs later
    /// ([`Scheduler::add`]).
    ///
    /// It returns once the task is spawned. The task then creates the state
    /// directory and checks that Redis does not evict keys; if either
    /// fails it ends, and [`Scheduler::ready`] (which a service should
    /// await before it calls itself healthy) or [`Scheduler::shutdown`]
    /// reports why ([`EmbedError::Refused`]); meanwhile no job runs on
    /// this instance and [`Scheduler::add`] returns [`EmbedError::Stopped`].
    ///
    /// ```no_run
    /// use cronlease::{EmbedError, JobBuilder, Run};
    /// # async fn f(cluster: cronlease::Cluster) -> Result<(), cronlease::EmbedError> {
    /// let job = JobBuilder::new("lottery-draw", "0 12 * * *")
    ///     .timezone("Asia/Shangai")
    ///     .run(|_run: Run| async { Ok::<(), std::io::Error>(()) });
    /// match cluster.scheduler().job(job).start() {
    ///     Err(EmbedError::Config(error)) => assert_eq!(error.problems[0].field.as_deref(), Some("timezone")),
    ///     _ => unreachable!("Asia/Shangai is a typo"),
    /// }
    /// # Ok(()) }
    /// ```
    pub fn start(self) -> Result<Scheduler, EmbedError> {
        refuse_duplicates(&self.jobs)?;
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

/// [`EmbedError::DuplicateJob`] if two of `jobs` share a name.
fn refuse_duplicates(jobs: &[EmbeddedJob]) -> Result<(), EmbedError> {
    let mut names: Vec<&str> = jobs.iter().map(|j| j.name.as_str()).collect();
    names.sort_unstable();
    match names.windows(2).find(|w| w[0] == w[1]) {
        Some(twice) => Err(EmbedError::DuplicateJob(twice[0].to_string())),
        None => Ok(()),
    }
}

fn tasks(jobs: &[EmbeddedJob]) -> Tasks {
    jobs.iter().fold(Tasks::processes(), |tasks, job| {
        tasks.job(&job.name, job.handler.clone())
    })
}

/// A running embedded scheduler: one replica of the cluster.
///
/// From [`SchedulerBuilder::start`]. Its jobs can be changed while it runs.
/// Dropping it begins the shutdown without waiting for it (the task goes on
/// draining on the runtime); [`Scheduler::shutdown`] waits and says how it
/// went.
///
/// ```no_run
/// use cronlease::{JobBuilder, Run};
///
/// # async fn f(cluster: cronlease::Cluster) -> Result<(), cronlease::EmbedError> {
/// let mut scheduler = cluster.scheduler().start()?;
/// scheduler.add(JobBuilder::new("report", "0 6 * * *").run(|_run: Run| async {
///     Ok::<(), std::io::Error>(())
/// }))?;
/// assert_eq!(scheduler.jobs(), ["report"]);
/// scheduler.remove("report")?;
/// scheduler.shutdown().await?;
/// # Ok(()) }
/// ```
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
    /// Adds a job while running: it claims from its next tick on. An error,
    /// and no change, if it is not valid ([`EmbedError::Config`]), its name
    /// is taken ([`EmbedError::JobExists`]) or the scheduler's task is gone
    /// ([`EmbedError::Stopped`]). The change is sent to the replica's task,
    /// which applies it a moment later.
    ///
    /// ```no_run
    /// use cronlease::{EmbedError, JobBuilder, Run};
    /// # async fn f(cluster: cronlease::Cluster) -> Result<(), cronlease::EmbedError> {
    /// let mut scheduler = cluster.scheduler().start()?;
    /// let job = JobBuilder::new("report", "0 6 * * *").run(|_run: Run| async { Ok::<(), std::io::Error>(()) });
    /// scheduler.add(job.clone())?;
    /// assert!(matches!(scheduler.add(job), Err(EmbedError::JobExists(name)) if name == "report"));
    /// # Ok(()) }
    /// ```
    pub fn add(&mut self, job: EmbeddedJob) -> Result<(), EmbedError> {
        if self.jobs.iter().any(|j| j.name == job.name) {
            return Err(EmbedError::JobExists(job.name));
        }
        let mut jobs = self.jobs.clone();
        jobs.push(job);
        self.replace(jobs)
    }

    /// Removes a job while running: it claims no more ticks, and a run in
    /// flight goes on to its end. [`EmbedError::NoSuchJob`] if no job has
    /// this name, [`EmbedError::Stopped`] if the scheduler's task is gone.
    ///
    /// ```no_run
    /// # async fn f(cluster: cronlease::Cluster) -> Result<(), cronlease::EmbedError> {
    /// let mut scheduler = cluster.scheduler().start()?;
    /// assert!(matches!(scheduler.remove("nope"), Err(cronlease::EmbedError::NoSuchJob(_))));
    /// # Ok(()) }
    /// ```
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

    /// Replaces every job at once, as the daemon's reload does. A job
    /// whose settings did not change keeps its schedule undisturbed (its
    /// next runs call the new handler); a changed one starts over with the
    /// new settings; a missing one is removed. Runs in flight go on with
    /// the definition they started with. An error, and no change, if a job
    /// is not valid ([`EmbedError::Config`], every problem), two share a
    /// name ([`EmbedError::DuplicateJob`]) or the scheduler's task is gone
    /// ([`EmbedError::Stopped`]).
    ///
    /// ```no_run
    /// use cronlease::{EmbeddedJob, JobBuilder, Run};
    /// # fn load_jobs() -> Vec<EmbeddedJob> { Vec::new() }
    /// # async fn f(cluster: cronlease::Cluster) -> Result<(), cronlease::EmbedError> {
    /// let mut scheduler = cluster.scheduler().start()?;
    /// // e.g. after the service's own configuration changed
    /// scheduler.set_jobs(load_jobs())?;
    /// # Ok(()) }
    /// ```
    pub fn set_jobs(&mut self, jobs: Vec<EmbeddedJob>) -> Result<(), EmbedError> {
        refuse_duplicates(&jobs)?;
        self.replace(jobs)
    }

    /// The names of the scheduled jobs, in the order they were given.
    ///
    /// ```no_run
    /// # async fn f(cluster: cronlease::Cluster) -> Result<(), cronlease::EmbedError> {
    /// let scheduler = cluster.scheduler().start()?;
    /// assert!(scheduler.jobs().is_empty());
    /// # Ok(()) }
    /// ```
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
    /// and its jobs' loops are running (its first heartbeat, which shows it
    /// in `cronlease status`, follows within a heartbeat period).
    /// [`SchedulerBuilder::start`] returns before that; a service that
    /// must not report itself healthy without its jobs waits here. An
    /// error if the scheduler refused to run ([`EmbedError::Refused`]) or
    /// stopped; at once when it was ready before.
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

    /// Stops claiming, lets runs in flight finish within `shutdown_grace`,
    /// then tells the rest to stop ([`Stop::Shutdown`]) and drops those
    /// still going `kill_grace` later; records their outcomes (spooled if
    /// Redis is away) and leaves the cluster. Returns
    /// [`EmbedError::Refused`] if the scheduler refused to run (unless
    /// [`Scheduler::ready`] returned it already), and
    /// [`EmbedError::Stopped`] if its task panicked or was cancelled.
    ///
    /// ```no_run
    /// # async fn f(cluster: cronlease::Cluster) -> Result<(), cronlease::EmbedError> {
    /// let scheduler = cluster.scheduler().start()?;
    /// // … until the service is asked to stop …
    /// scheduler.shutdown().await?;
    /// # Ok(()) }
    /// ```
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

// Debug shows what identifies each value; never the Redis settings, whose
// URL may hold a password.
impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field("holder", &self.holder)
            .field("host", &self.host)
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for EmbeddedJob {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmbeddedJob")
            .field("name", &self.name)
            .field("settings", &self.table)
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for SchedulerBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SchedulerBuilder")
            .field("settings", &self.daemon)
            .field("jobs", &self.jobs)
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for Scheduler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scheduler")
            .field("jobs", &self.jobs())
            .field("stopping", &self.shutdown.is_cancelled())
            .finish_non_exhaustive()
    }
}

impl Drop for Scheduler {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

/// What a handler is given, once per attempt: which job and tick it runs,
/// its fence, and the signal to stop ([`Run::stopped`]).
///
/// ```
/// use cronlease::{JobBuilder, Run};
///
/// # async fn draw_winners(tick: chrono::DateTime<chrono::Utc>, fence: u64) -> Result<(), std::io::Error> { Ok(()) }
/// async fn draw(mut run: Run) -> Result<(), std::io::Error> {
///     tokio::select! {
///         result = draw_winners(run.tick(), run.fence()) => result,
///         reason = run.stopped() => Err(std::io::Error::other(format!("stopped: {reason:?}"))),
///     }
/// }
///
/// let job = JobBuilder::new("lottery-draw", "0 12 * * *").run(draw);
/// ```
#[derive(Debug)]
pub struct Run {
    context: RunContext,
    stop: StopSignal,
}

impl Run {
    /// The job's name.
    ///
    /// ```
    /// use cronlease::{JobBuilder, Run};
    /// let job = JobBuilder::new("report", "0 6 * * *").run(|run: Run| async move {
    ///     println!("running {}", run.job());
    ///     Ok::<(), std::io::Error>(())
    /// });
    /// ```
    pub fn job(&self) -> &str {
        &self.context.job
    }

    /// The tick this run is for (UTC): the schedule's time, not the
    /// moment the run started (a missed tick run late keeps its time). For
    /// a manual run (`cronlease trigger`), the time it was requested.
    ///
    /// ```
    /// use cronlease::{JobBuilder, Run};
    /// let job = JobBuilder::new("report", "0 6 * * *").run(|run: Run| async move {
    ///     let day = run.tick().date_naive();  // the day this draw is for
    ///     Ok::<(), std::io::Error>(())
    /// });
    /// ```
    pub fn tick(&self) -> DateTime<Utc> {
        DateTime::from_timestamp_millis(self.context.tick_ms).unwrap_or_default()
    }

    /// [`Run::tick`] as milliseconds since the Unix epoch.
    ///
    /// ```
    /// use cronlease::{JobBuilder, Run};
    /// let job = JobBuilder::new("report", "0 6 * * *").run(|run: Run| async move {
    ///     assert_eq!(run.tick_ms(), run.tick().timestamp_millis());
    ///     Ok::<(), std::io::Error>(())
    /// });
    /// ```
    pub fn tick_ms(&self) -> i64 {
        self.context.tick_ms
    }

    /// The fence: higher than every earlier run's of this job, and the same
    /// for every attempt of this run. Every write the run makes should
    /// carry it, and the store it writes to should refuse a fence lower
    /// than one it has seen: an instance that lost its lease without
    /// knowing it (a long pause, a partition) then cannot overwrite the
    /// newer run's work.
    ///
    /// ```
    /// use cronlease::{JobBuilder, Run};
    /// # async fn save_winners(fence: u64) -> Result<(), std::io::Error> { Ok(()) }
    /// // e.g. `UPDATE draws SET winners = $1, fence = $2 WHERE fence < $2`
    /// let job = JobBuilder::new("lottery-draw", "0 12 * * *")
    ///     .run(|run: Run| async move { save_winners(run.fence()).await });
    /// ```
    pub fn fence(&self) -> u64 {
        self.context.fence
    }

    /// The run's id, as `cronlease history` shows it: one per claim,
    /// shared by its retries.
    ///
    /// ```
    /// use cronlease::{JobBuilder, Run};
    /// let job = JobBuilder::new("report", "0 6 * * *").run(|run: Run| async move {
    ///     println!("run {} of {}", run.run_id(), run.job());
    ///     Ok::<(), std::io::Error>(())
    /// });
    /// ```
    pub fn run_id(&self) -> &str {
        &self.context.run_id
    }

    /// 1 for the first attempt, 2 for the first retry, … (see
    /// [`JobBuilder::retries`]).
    ///
    /// ```
    /// use cronlease::{JobBuilder, Run};
    /// let job = JobBuilder::new("report", "0 6 * * *").run(|run: Run| async move {
    ///     if run.attempt() > 1 {
    ///         println!("retrying, attempt {}", run.attempt());
    ///     }
    ///     Ok::<(), std::io::Error>(())
    /// });
    /// ```
    pub fn attempt(&self) -> u32 {
        self.context.attempt
    }

    /// The instance running it: the scheduler's replica id
    /// ([`SchedulerBuilder::replica_id`]).
    ///
    /// ```
    /// use cronlease::{JobBuilder, Run};
    /// let job = JobBuilder::new("report", "0 6 * * *").run(|run: Run| async move {
    ///     println!("{} runs on {}", run.job(), run.replica());
    ///     Ok::<(), std::io::Error>(())
    /// });
    /// ```
    pub fn replica(&self) -> &str {
        &self.context.replica
    }

    /// Resolves when the run must stop, with the reason: the lease is lost
    /// ([`Stop::LostLease`]), the job's timeout passed ([`Stop::Timeout`]),
    /// or the scheduler is shutting down ([`Stop::Shutdown`]). From then
    /// on the handler has the scheduler's `kill_grace` to return, and is
    /// dropped after it. The attempt's outcome is the stop's
    /// (`lost_lease`, `timeout`, `interrupted`) whatever the handler
    /// returns.
    ///
    /// A stop requested before the first call is not missed. Each call
    /// resolves with a stop not yet returned (a lost lease may follow a
    /// timeout) and is pending until there is one. Cancel-safe: it can sit
    /// in a `select!` in a loop.
    ///
    /// ```
    /// use cronlease::{JobBuilder, Run};
    /// # async fn next_batch() -> Option<Vec<u64>> { None }
    /// # async fn write(batch: Vec<u64>, fence: u64) {}
    /// async fn export(mut run: Run) -> Result<(), std::io::Error> {
    ///     loop {
    ///         tokio::select! {
    ///             batch = next_batch() => match batch {
    ///                 Some(batch) => write(batch, run.fence()).await,
    ///                 None => return Ok(()),
    ///             },
    ///             reason = run.stopped() => {
    ///                 // After Stop::LostLease another instance may run the tick: write nothing more.
    ///                 eprintln!("export stopped: {reason:?}");
    ///                 return Ok(());
    ///             }
    ///         }
    ///     }
    /// }
    /// let job = JobBuilder::new("export", "*/5 * * * *").run(export);
    /// ```
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
