//! An embedded scheduler's notification settings: its channels and the
//! `[daemon]` rules of a job table, as code.

use std::time::Duration;

use super::SchedulerBuilder;
use crate::config::EventKind;
use crate::notify::Channel;

impl SchedulerBuilder {
    /// Adds a notification channel named `name` (a `[notify.<name>]`
    /// table of a job table): jobs list it in
    /// [`JobBuilder::notify`](crate::JobBuilder::notify), or
    /// [`SchedulerBuilder::notify`] makes it every job's. Checked at
    /// [`SchedulerBuilder::start`]; a second channel of one name replaces
    /// the first.
    ///
    /// ```no_run
    /// use cronlease::{Channel, JobBuilder, Run};
    ///
    /// # async fn f(cluster: cronlease::Cluster) -> Result<(), cronlease::SchedulerError> {
    /// let scheduler = cluster
    ///     .scheduler()
    ///     .channel("ops", Channel::webhook("https://hooks.example.com/cron").secret("s3cr3t"))
    ///     .job(
    ///         JobBuilder::new("report", "0 6 * * *")
    ///             .notify(&["ops"])
    ///             .run(|_run: Run| async { Ok::<(), std::io::Error>(()) }),
    ///     )
    ///     .start()?;
    /// # Ok(()) }
    /// ```
    pub fn channel(mut self, name: &str, channel: Channel) -> SchedulerBuilder {
        self.channels.retain(|(n, _)| n != name);
        self.channels.push((name.to_string(), channel));
        self
    }

    /// The channels every job notifies unless it names its own
    /// (`[daemon] notify`), and where a dead instance is announced.
    ///
    /// ```no_run
    /// use cronlease::Channel;
    /// # async fn f(cluster: cronlease::Cluster) -> Result<(), cronlease::SchedulerError> {
    /// let scheduler = cluster
    ///     .scheduler()
    ///     .channel("ops", Channel::slack("https://hooks.slack.com/services/T0/B0/X"))
    ///     .notify(&["ops"])
    ///     .start()?;
    /// # Ok(()) }
    /// ```
    pub fn notify(self, channels: &[&str]) -> SchedulerBuilder {
        let names: Vec<toml::Value> = channels.iter().map(|c| (*c).into()).collect();
        self.set_value("notify", names.into())
    }

    /// The events every job's channels are told about unless the job says
    /// (`[daemon] notify_on`; default: all but `late`, and `replica_dead`
    /// for the instances themselves).
    ///
    /// ```no_run
    /// use cronlease::EventKind;
    /// # async fn f(cluster: cronlease::Cluster) -> Result<(), cronlease::SchedulerError> {
    /// let scheduler = cluster
    ///     .scheduler()
    ///     .notify_on([EventKind::Failed, EventKind::ReplicaDead])
    ///     .start()?;
    /// # Ok(()) }
    /// ```
    pub fn notify_on(self, events: impl IntoIterator<Item = EventKind>) -> SchedulerBuilder {
        let names: Vec<toml::Value> = events.into_iter().map(|e| e.as_str().into()).collect();
        self.set_value("notify_on", names.into())
    }

    /// How long one delivery is retried (`[daemon] retry_for`, default 1 h).
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// # async fn f(cluster: cronlease::Cluster) -> Result<(), cronlease::SchedulerError> {
    /// let scheduler = cluster.scheduler().retry_for(Duration::from_secs(600)).start()?;
    /// # Ok(()) }
    /// ```
    pub fn retry_for(self, retry_for: Duration) -> SchedulerBuilder {
        self.set_value("retry_for", super::duration(retry_for))
    }

    /// The external base URL of a dashboard showing this cluster
    /// (`[daemon] dashboard_url`), for links in messages.
    ///
    /// ```no_run
    /// # async fn f(cluster: cronlease::Cluster) -> Result<(), cronlease::SchedulerError> {
    /// let scheduler = cluster.scheduler().dashboard_url("https://cron.example.com").start()?;
    /// # Ok(()) }
    /// ```
    pub fn dashboard_url(self, url: &str) -> SchedulerBuilder {
        self.set_value("dashboard_url", url.into())
    }

    fn set_value(mut self, key: &str, value: toml::Value) -> SchedulerBuilder {
        self.daemon.insert(key.into(), value);
        self
    }
}
