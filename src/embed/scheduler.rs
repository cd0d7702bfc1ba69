//! The embedded scheduler: its builder, and a running scheduler's jobs,
//! readiness and shutdown.

use super::{config_error, duration, embedded_settings, job_context, validate_jobs};
use crate::Cluster;
use crate::ConfigError;
use crate::Job;
use crate::SchedulerError;
use crate::clock::RedisClock;
use crate::config::JobContext;
use crate::daemon;
use crate::daemon::DaemonError;
use crate::daemon::Reload;
use crate::daemon::World;
use crate::task::Tasks;
use std::path::Path;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use std::collections::HashSet;

/// The jobs of a scheduler not started yet, and its replica settings: the
/// `[daemon]` section of a job table, as code.
///
/// From [`Cluster::scheduler`]. Nothing is checked until
/// [`SchedulerBuilder::start`](crate::SchedulerBuilder::start), which reports every invalid setting and
/// job at once. Durations are taken in whole milliseconds; zero is not
/// valid.
///
/// ```no_run
/// use std::path::Path;
/// use std::time::Duration;
/// use cronlease::{JobBuilder, Run};
///
/// # async fn f(cluster: cronlease::Cluster) -> Result<(), cronlease::SchedulerError> {
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
    pub(super) cluster: Cluster,
    pub(super) daemon: toml::Table,
    pub(super) jobs: Vec<Job>,
    /// The notification channels, by name, in the order given.
    #[cfg(feature = "notify")]
    pub(super) channels: Vec<(String, crate::notify::Channel)>,
}

impl SchedulerBuilder {
    /// Adds a job. Each needs its own name: [`SchedulerBuilder::start`](crate::SchedulerBuilder::start)
    /// refuses two of the same name ([`SchedulerError::DuplicateJob`](crate::SchedulerError::DuplicateJob)).
    ///
    /// ```no_run
    /// use cronlease::{JobBuilder, Run};
    /// # async fn f(cluster: cronlease::Cluster) -> Result<(), cronlease::SchedulerError> {
    /// let scheduler = cluster
    ///     .scheduler()
    ///     .job(JobBuilder::new("a", "@hourly").run(|_run: Run| async { Ok::<(), std::io::Error>(()) }))
    ///     .job(JobBuilder::new("b", "@daily").run(|_run: Run| async { Ok::<(), std::io::Error>(()) }))
    ///     .start()?;
    /// # Ok(()) }
    /// ```
    pub fn job(mut self, job: Job) -> SchedulerBuilder {
        self.jobs.push(job);
        self
    }

    /// This instance's name in `cronlease status`, in outcomes and in
    /// [`Run::replica`](crate::Run::replica) (`replica_id`, default `<host>-<pid>-<4 hex>`): 1
    /// to 128 characters from `A-Z a-z 0-9 _ . -`, different on every
    /// instance.
    ///
    /// ```no_run
    /// # async fn f(cluster: cronlease::Cluster) -> Result<(), cronlease::SchedulerError> {
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
    /// run ([`SchedulerError::Refused`](crate::SchedulerError::Refused)). A service not running as root
    /// usually needs to set it.
    ///
    /// ```no_run
    /// use std::path::Path;
    /// # async fn f(cluster: cronlease::Cluster) -> Result<(), cronlease::SchedulerError> {
    /// let scheduler = cluster.scheduler().state_dir(Path::new("/var/lib/shop/cronlease")).start()?;
    /// # Ok(()) }
    /// ```
    pub fn state_dir(self, dir: &Path) -> SchedulerBuilder {
        self.set("state_dir", dir.to_string_lossy().into_owned().into())
    }

    /// How long a run's claim holds without renewal (`lease`, default
    /// 30 s, from 1 s to 1 h, and more than three times the Redis command
    /// timeout). Renewed every third of it; a run whose lease cannot be
    /// proven is stopped with [`Stop::LostLease`](crate::Stop::LostLease). Longer: fewer renewals,
    /// but a dead instance's run is noticed later.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// # async fn f(cluster: cronlease::Cluster) -> Result<(), cronlease::SchedulerError> {
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
    /// # async fn f(cluster: cronlease::Cluster) -> Result<(), cronlease::SchedulerError> {
    /// let scheduler = cluster.scheduler().heartbeat(Duration::from_secs(10)).start()?;
    /// # Ok(()) }
    /// ```
    pub fn heartbeat(self, period: Duration) -> SchedulerBuilder {
        self.set("heartbeat", duration(period))
    }

    /// How long [`Scheduler::shutdown`](crate::Scheduler::shutdown) lets runs in flight finish before
    /// telling them to stop with [`Stop::Shutdown`](crate::Stop::Shutdown) (`shutdown_grace`,
    /// default 30 s, at most 1 h).
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// # async fn f(cluster: cronlease::Cluster) -> Result<(), cronlease::SchedulerError> {
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
    /// # async fn f(cluster: cronlease::Cluster) -> Result<(), cronlease::SchedulerError> {
    /// let scheduler = cluster.scheduler().history(100).start()?;
    /// # Ok(()) }
    /// ```
    pub fn history(self, outcomes: u32) -> SchedulerBuilder {
        self.set("history", i64::from(outcomes).into())
    }

    /// How long a handler told to stop ([`Run::stopped`](crate::Run::stopped)) may go on before
    /// it is dropped (`kill_grace`, default 10 s, at most 1 h); the
    /// outcome's output then says it was dropped.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// # async fn f(cluster: cronlease::Cluster) -> Result<(), cronlease::SchedulerError> {
    /// let scheduler = cluster.scheduler().kill_grace(Duration::from_secs(2)).start()?;
    /// # Ok(()) }
    /// ```
    pub fn kill_grace(self, grace: Duration) -> SchedulerBuilder {
        self.set("kill_grace", duration(grace))
    }

    /// Adds one of this instance's tags (`[daemon] tags`): a job whose
    /// [`JobBuilder::run_on`](crate::JobBuilder::run_on) names tags runs
    /// only on instances that have every one of them. 1 to 64 characters
    /// from `A-Z a-z 0-9 _ . -`; a bad one is refused at
    /// [`SchedulerBuilder::start`] ([`SchedulerError::Config`](crate::SchedulerError::Config),
    /// field `tags`).
    ///
    /// ```no_run
    /// # async fn f(cluster: cronlease::Cluster) -> Result<(), cronlease::SchedulerError> {
    /// let scheduler = cluster.scheduler().tag("gpu").tag("eu").start()?;
    /// # Ok(()) }
    /// ```
    pub fn tag(mut self, tag: &str) -> SchedulerBuilder {
        let tags = self
            .daemon
            .entry("tags")
            .or_insert_with(|| toml::Value::Array(Vec::new()));
        if let toml::Value::Array(tags) = tags {
            tags.push(tag.into());
        }
        self
    }

    /// This instance's tags, replacing any given before (see
    /// [`SchedulerBuilder::tag`]).
    ///
    /// ```no_run
    /// # async fn f(cluster: cronlease::Cluster) -> Result<(), cronlease::SchedulerError> {
    /// let scheduler = cluster.scheduler().tags(["gpu", "eu"]).start()?;
    /// # Ok(()) }
    /// ```
    pub fn tags<'t>(self, tags: impl IntoIterator<Item = &'t str>) -> SchedulerBuilder {
        let tags = tags.into_iter().map(toml::Value::from).collect();
        self.set("tags", toml::Value::Array(tags))
    }

    /// The most runs this instance keeps in flight at once, whatever
    /// started them (`[daemon] max_runs`, 1 to 1,000,000; default: no
    /// limit). A full instance makes no claim, so another takes the tick
    /// at its rendezvous turn; when every instance is full, the tick waits
    /// within its grace and is then recorded `skipped_capacity`.
    ///
    /// ```no_run
    /// # async fn f(cluster: cronlease::Cluster) -> Result<(), cronlease::SchedulerError> {
    /// let scheduler = cluster.scheduler().max_runs(4).start()?;
    /// # Ok(()) }
    /// ```
    pub fn max_runs(self, runs: u32) -> SchedulerBuilder {
        self.set("max_runs", i64::from(runs).into())
    }

    fn set(mut self, key: &str, value: toml::Value) -> SchedulerBuilder {
        self.daemon.insert(key.into(), value);
        self
    }

    /// Checks every job and setting, returning every problem at once as
    /// [`SchedulerError::Config`](crate::SchedulerError::Config), and starts the replica as a task on the
    /// current tokio runtime (it panics outside one). A scheduler with no
    /// jobs is valid: it joins the cluster and takes jobs later
    /// ([`Scheduler::add`](crate::Scheduler::add)).
    ///
    /// It returns once the task is spawned. The task then creates the state
    /// directory and checks that Redis does not evict keys; if either
    /// fails it ends, and [`Scheduler::ready`](crate::Scheduler::ready) (which a service should
    /// await before it calls itself healthy) or [`Scheduler::shutdown`](crate::Scheduler::shutdown)
    /// reports why ([`SchedulerError::Refused`](crate::SchedulerError::Refused)); meanwhile no job runs on
    /// this instance and [`Scheduler::add`](crate::Scheduler::add) returns [`SchedulerError::Stopped`](crate::SchedulerError::Stopped).
    ///
    /// ```no_run
    /// use cronlease::{SchedulerError, JobBuilder, Run};
    /// # async fn f(cluster: cronlease::Cluster) -> Result<(), cronlease::SchedulerError> {
    /// let job = JobBuilder::new("lottery-draw", "0 12 * * *")
    ///     .timezone("Asia/Shangai")
    ///     .run(|_run: Run| async { Ok::<(), std::io::Error>(()) });
    /// match cluster.scheduler().job(job).start() {
    ///     Err(SchedulerError::Config(error)) => assert_eq!(error.problems[0].field.as_deref(), Some("timezone")),
    ///     _ => unreachable!("Asia/Shangai is a typo"),
    /// }
    /// # Ok(()) }
    /// ```
    pub fn start(self) -> Result<Scheduler, SchedulerError> {
        refuse_duplicates(&self.jobs)?;
        let settings = self.settings();
        let context = self.context(settings.as_ref().ok());
        let jobs = validate_jobs(&self.jobs, &|_| false, &context);
        let config = match (settings, jobs) {
            (Ok(mut config), Ok(jobs)) => {
                config.jobs = jobs
                    .into_iter()
                    .map(|job| (job.name.clone(), job))
                    .collect();
                config
            }
            (settings, jobs) => {
                let problems = |error: Option<ConfigError>| error.map(|e| e.problems);
                return Err(config_error(
                    problems(settings.err()).unwrap_or_default(),
                    problems(jobs.err()).unwrap_or_default(),
                )
                .into());
            }
        };
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
            store: self.cluster.store.clone(),
            requested_by: format!("embedded@{}", self.cluster.holder.holder()),
            context,
            names: self.jobs.iter().map(|j| j.name.clone()).collect(),
            jobs: self.jobs,
            shutdown,
            reload,
            ready: Some(ready_rx),
            replica: Some(replica),
        })
    }
}

impl SchedulerBuilder {
    /// What the jobs are checked against: the channels given (valid or
    /// not: an invalid one has problems of its own) and, when the settings
    /// are valid, their notification defaults.
    fn context(&self, settings: Option<&crate::config::Config>) -> JobContext {
        let context = job_context(&self.cluster.redis_config);
        #[cfg(feature = "notify")]
        {
            let mut declared: Vec<String> = self.channels.iter().map(|(n, _)| n.clone()).collect();
            declared.sort();
            let none = std::collections::BTreeMap::new();
            let (channels, defaults) = match settings {
                Some(config) => (&config.notify, config.daemon.notify.clone()),
                None => (&none, crate::config::DaemonNotify::default()),
            };
            context.with_notify(channels, declared, defaults)
        }
        #[cfg(not(feature = "notify"))]
        {
            let _ = settings;
            context
        }
    }

    /// The settings and channels, validated as a job table's would be.
    fn settings(&self) -> Result<crate::config::Config, ConfigError> {
        #[cfg(feature = "notify")]
        {
            let tables = self
                .channels
                .iter()
                .map(|(name, c)| (name.clone(), c.table.clone().into()));
            let notify: toml::Table = tables.collect();
            let mut config = embedded_settings(&self.cluster.redis, &self.daemon, &notify)?;
            for (name, channel) in &self.channels {
                if let Some(spec) = config.notify.get_mut(name) {
                    channel.add_secrets(spec);
                }
            }
            Ok(config)
        }
        #[cfg(not(feature = "notify"))]
        embedded_settings(&self.cluster.redis, &self.daemon, &toml::Table::new())
    }
}

/// [`SchedulerError::DuplicateJob`](crate::SchedulerError::DuplicateJob) if two of `jobs` share a name.
fn refuse_duplicates(jobs: &[Job]) -> Result<(), SchedulerError> {
    let mut names: Vec<&str> = jobs.iter().map(|j| j.name.as_str()).collect();
    names.sort_unstable();
    match names.windows(2).find(|w| w[0] == w[1]) {
        Some(twice) => Err(SchedulerError::DuplicateJob(twice[0].to_string())),
        None => Ok(()),
    }
}

fn tasks(jobs: &[Job]) -> Tasks {
    jobs.iter().fold(Tasks::processes(), |tasks, job| {
        tasks.job(&job.name, job.handler.clone())
    })
}

/// A running embedded scheduler: one replica of the cluster.
///
/// From [`SchedulerBuilder::start`](crate::SchedulerBuilder::start). Its jobs can be changed while it runs.
/// Dropping it begins the shutdown without waiting for it (the task goes on
/// draining on the runtime); [`Scheduler::shutdown`](crate::Scheduler::shutdown) waits and says how it
/// went.
///
/// ```no_run
/// use cronlease::{JobBuilder, Run};
///
/// # async fn f(cluster: cronlease::Cluster) -> Result<(), cronlease::SchedulerError> {
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
    /// What each job is checked against when it is added: the settings
    /// do not change while the scheduler runs.
    context: JobContext,
    jobs: Vec<Job>,
    /// The names of `jobs`, so an add finds a taken name at once.
    names: HashSet<String>,
    shutdown: CancellationToken,
    reload: mpsc::UnboundedSender<Reload>,
    /// Answered once the replica claims; None once that was seen.
    ready: Option<oneshot::Receiver<()>>,
    replica: Option<JoinHandle<Result<(), DaemonError>>>,
    /// The cluster's store, where [`Scheduler::trigger`] queues requests.
    store: crate::store::Store,
    /// Who a request of [`Scheduler::trigger`] says asked for it:
    /// `embedded@<host>-<pid>`.
    requested_by: String,
}

impl Scheduler {
    /// Asks the cluster to run `job` once now, with `params` (name,
    /// value) for some of its parameters and the defaults for the others
    /// ([`JobBuilder::param`](crate::JobBuilder::param)); returns the
    /// run's id, as `cronlease history` shows it. The request is queued
    /// in Redis as `cronlease trigger` queues one: exactly one live
    /// instance that has the job runs it, under the job's overlap policy,
    /// and the schedule is not affected. The handler reads the values with
    /// [`Run::param`](crate::Run::param).
    ///
    /// The values are checked first, and nothing is queued if one does
    /// not fit ([`SchedulerError::Params`](crate::SchedulerError::Params):
    /// a name the job does not declare, a value not in its `allowed`
    /// list, too long or with a control character). Errors too, and
    /// nothing queued, for a job this scheduler does not have
    /// ([`SchedulerError::NoSuchJob`](crate::SchedulerError::NoSuchJob)),
    /// a paused one, or any while the cluster is paused
    /// ([`SchedulerError::Paused`](crate::SchedulerError::Paused))
    /// and Redis failing, or a quorum, which has no queue of requests
    /// ([`SchedulerError::Redis`](crate::SchedulerError::Redis)).
    ///
    /// Called inside a span that a `tracing-opentelemetry` layer records
    /// (with the `otel` feature), the run's span continues that trace, as a
    /// child of that span.
    ///
    /// ```no_run
    /// use cronlease::{JobBuilder, ParamError, ParamSpec, Run, SchedulerError};
    ///
    /// # async fn f(cluster: cronlease::Cluster) -> Result<(), cronlease::SchedulerError> {
    /// let job = JobBuilder::new("export", "0 3 * * *")
    ///     .param("region", ParamSpec::new("eu").allowed(&["eu", "us"]))
    ///     .run(|run: Run| async move {
    ///         println!("exporting {:?}", run.param("region"));
    ///         Ok::<(), std::io::Error>(())
    ///     });
    /// let scheduler = cluster.scheduler().job(job).start()?;
    /// let run_id = scheduler.trigger("export", &[("region", "us")]).await?;
    /// println!("queued run {run_id}");
    /// match scheduler.trigger("export", &[("region", "mars")]).await {
    ///     Err(SchedulerError::Params { error: ParamError::NotAllowed { .. }, .. }) => {}
    ///     other => panic!("mars is not allowed: {other:?}"),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn trigger(
        &self,
        job: &str,
        params: &[(&str, &str)],
    ) -> Result<String, SchedulerError> {
        let Some(declared) = self.jobs.iter().find(|j| j.name == job) else {
            return Err(SchedulerError::NoSuchJob(job.to_string()));
        };
        // Its upstreams, if any, are the scheduler's: it was added.
        let validated = validate_jobs(std::slice::from_ref(declared), &|_| true, &self.context)?;
        let given: Vec<(String, String)> = params
            .iter()
            .map(|(name, value)| (name.to_string(), value.to_string()))
            .collect();
        if let Some(definition) = validated.first() {
            definition
                .params
                .resolve(given.iter().cloned())
                .map_err(|error| SchedulerError::Params {
                    job: job.to_string(),
                    error,
                })?;
        }
        let now_ms = self.store.server_time_ms().await?;
        let held = self
            .store
            .job_state(job)
            .await?
            .pause
            .is_some_and(|p| p.holds_at(now_ms))
            || self
                .store
                .cluster_pause()
                .await?
                .is_some_and(|p| p.holds(now_ms));
        if held {
            return Err(SchedulerError::Paused(job.to_string()));
        }
        let run_id = uuid::Uuid::new_v4().to_string();
        // The replicas' group reads from its creation on: made now if no
        // replica made it yet, so the request is not queued before it.
        self.store.ensure_trigger_group().await?;
        // The caller's trace, when an OpenTelemetry layer records its span
        // (`otel`): the run's span continues it.
        let traceparent = crate::trace::traceparent_of(&tracing::Span::current());
        self.store
            .enqueue_trigger(
                job,
                &run_id,
                &self.requested_by,
                &given,
                traceparent.as_ref(),
            )
            .await?;
        if let Err(e) = self
            .store
            .record_action(job, "trigger", &self.requested_by, &run_id)
            .await
        {
            tracing::warn!(job, error = %e, "the run was queued but could not be recorded in the job's actions");
        }
        Ok(run_id)
    }

    /// Adds a job while running: it claims from its next tick on. An error,
    /// and no change, if it is not valid ([`SchedulerError::Config`](crate::SchedulerError::Config)), its name
    /// is taken ([`SchedulerError::JobExists`](crate::SchedulerError::JobExists)) or the scheduler's task is gone
    /// ([`SchedulerError::Stopped`](crate::SchedulerError::Stopped)). The change is sent to the replica's task,
    /// which applies it a moment later.
    ///
    /// ```no_run
    /// use cronlease::{SchedulerError, JobBuilder, Run};
    /// # async fn f(cluster: cronlease::Cluster) -> Result<(), cronlease::SchedulerError> {
    /// let mut scheduler = cluster.scheduler().start()?;
    /// let job = JobBuilder::new("report", "0 6 * * *").run(|_run: Run| async { Ok::<(), std::io::Error>(()) });
    /// scheduler.add(job.clone())?;
    /// assert!(matches!(scheduler.add(job), Err(SchedulerError::JobExists(name)) if name == "report"));
    /// # Ok(()) }
    /// ```
    pub fn add(&mut self, job: Job) -> Result<(), SchedulerError> {
        if self.names.contains(&job.name) {
            return Err(SchedulerError::JobExists(job.name));
        }
        let names = &self.names;
        let validated = validate_jobs(
            std::slice::from_ref(&job),
            &|name| names.contains(name),
            &self.context,
        )?;
        let Some(validated) = validated.into_iter().next() else {
            unreachable!("a job with no problem is validated into one job");
        };
        self.send(Reload::Add {
            job: Box::new(validated),
            task: job.handler.clone(),
        })?;
        self.names.insert(job.name.clone());
        self.jobs.push(job);
        Ok(())
    }

    /// Removes a job while running: it claims no more ticks, and a run in
    /// flight goes on to its end. [`SchedulerError::NoSuchJob`](crate::SchedulerError::NoSuchJob) if no job has
    /// this name, [`SchedulerError::Stopped`](crate::SchedulerError::Stopped) if the scheduler's task is gone.
    ///
    /// ```no_run
    /// # async fn f(cluster: cronlease::Cluster) -> Result<(), cronlease::SchedulerError> {
    /// let mut scheduler = cluster.scheduler().start()?;
    /// assert!(matches!(scheduler.remove("nope"), Err(cronlease::SchedulerError::NoSuchJob(_))));
    /// # Ok(()) }
    /// ```
    pub fn remove(&mut self, name: &str) -> Result<(), SchedulerError> {
        if !self.names.contains(name) {
            return Err(SchedulerError::NoSuchJob(name.to_string()));
        }
        self.send(Reload::Remove {
            name: name.to_string(),
        })?;
        self.names.remove(name);
        self.jobs.retain(|j| j.name != name);
        Ok(())
    }

    /// Replaces every job at once, as the daemon's reload does. A job
    /// whose settings did not change keeps its schedule undisturbed (its
    /// next runs call the new handler); a changed one starts over with the
    /// new settings; a missing one is removed. Runs in flight go on with
    /// the definition they started with. An error, and no change, if a job
    /// is not valid ([`SchedulerError::Config`](crate::SchedulerError::Config), every problem), two share a
    /// name ([`SchedulerError::DuplicateJob`](crate::SchedulerError::DuplicateJob)) or the scheduler's task is gone
    /// ([`SchedulerError::Stopped`](crate::SchedulerError::Stopped)).
    ///
    /// ```no_run
    /// use cronlease::{Job, JobBuilder, Run};
    /// # fn load_jobs() -> Vec<Job> { Vec::new() }
    /// # async fn f(cluster: cronlease::Cluster) -> Result<(), cronlease::SchedulerError> {
    /// let mut scheduler = cluster.scheduler().start()?;
    /// // e.g. after the service's own configuration changed
    /// scheduler.set_jobs(load_jobs())?;
    /// # Ok(()) }
    /// ```
    pub fn set_jobs(&mut self, jobs: Vec<Job>) -> Result<(), SchedulerError> {
        refuse_duplicates(&jobs)?;
        let validated = validate_jobs(&jobs, &|_| false, &self.context)?;
        self.send(Reload::Table {
            jobs: validated,
            tasks: tasks(&jobs),
        })?;
        self.names = jobs.iter().map(|j| j.name.clone()).collect();
        self.jobs = jobs;
        Ok(())
    }

    /// The names of the scheduled jobs, in the order they were given.
    ///
    /// ```no_run
    /// # async fn f(cluster: cronlease::Cluster) -> Result<(), cronlease::SchedulerError> {
    /// let scheduler = cluster.scheduler().start()?;
    /// assert!(scheduler.jobs().is_empty());
    /// # Ok(()) }
    /// ```
    pub fn jobs(&self) -> Vec<String> {
        self.jobs.iter().map(|j| j.name.clone()).collect()
    }

    /// Sends a change of the job table to the replica's task.
    fn send(&self, request: Reload) -> Result<(), SchedulerError> {
        self.reload
            .send(request)
            .map_err(|_| SchedulerError::Stopped("the replica is gone".into()))
    }

    /// Resolves once the scheduler claims ticks: it has checked that
    /// Redis cannot evict its keys and that its state directory is usable,
    /// and its jobs' loops are running (its first heartbeat, which shows it
    /// in `cronlease status`, follows within a heartbeat period).
    /// [`SchedulerBuilder::start`](crate::SchedulerBuilder::start) returns before that; a service that
    /// must not report itself healthy without its jobs waits here. An
    /// error if the scheduler refused to run ([`SchedulerError::Refused`](crate::SchedulerError::Refused)) or
    /// stopped; at once when it was ready before.
    ///
    /// ```no_run
    /// # async fn f(cluster: cronlease::Cluster) -> Result<(), cronlease::SchedulerError> {
    /// let mut scheduler = cluster.scheduler().start()?;
    /// scheduler.ready().await?;   // e.g. Redis with `maxmemory-policy allkeys-lru`: Refused
    /// # Ok(()) }
    /// ```
    pub async fn ready(&mut self) -> Result<(), SchedulerError> {
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
                Ok(Ok(())) => Err(SchedulerError::Stopped("before it was ready".into())),
                Err(e) => Err(SchedulerError::Stopped(e.to_string())),
            },
            None => Err(SchedulerError::Stopped("before it was ready".into())),
        }
    }

    /// Stops claiming, lets runs in flight finish within `shutdown_grace`,
    /// then tells the rest to stop ([`Stop::Shutdown`](crate::Stop::Shutdown)) and drops those
    /// still going `kill_grace` later; records their outcomes (spooled if
    /// Redis is away) and leaves the cluster. Returns
    /// [`SchedulerError::Refused`](crate::SchedulerError::Refused) if the scheduler refused to run (unless
    /// [`Scheduler::ready`](crate::Scheduler::ready) returned it already), and
    /// [`SchedulerError::Stopped`](crate::SchedulerError::Stopped) if its task panicked or was cancelled.
    ///
    /// ```no_run
    /// # async fn f(cluster: cronlease::Cluster) -> Result<(), cronlease::SchedulerError> {
    /// let scheduler = cluster.scheduler().start()?;
    /// // … until the service is asked to stop …
    /// scheduler.shutdown().await?;
    /// # Ok(()) }
    /// ```
    pub async fn shutdown(mut self) -> Result<(), SchedulerError> {
        self.shutdown.cancel();
        let Some(replica) = self.replica.take() else {
            return Ok(());
        };
        match replica.await {
            Ok(result) => Ok(result?),
            Err(e) => Err(SchedulerError::Stopped(e.to_string())),
        }
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
