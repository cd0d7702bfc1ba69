//! A job of an embedded scheduler: its settings, the same definition a
//! `[jobs.<name>]` table is read into ([`JobSpec`]), and its handler.

use super::StdError;
use crate::Run;
use crate::calendar::Calendar;
use crate::config::Misfire;
use crate::config::Mode;
use crate::config::OnHolderLost;
use crate::config::Overlap;
use crate::config::{Expressions, Moment};
use crate::schedule::DstGap;
use crate::schedule::DstRepeat;
use crate::task::Task;
use std::sync::Arc;
use std::time::Duration;

use super::run::Handler;
use crate::config::{DurationValue, Given, JobSpec, RawParam};

/// A job of an embedded scheduler, before its handler: name, schedule and
/// the settings of a `[jobs.<name>]` table.
///
/// It has every setting of the table but `command`, `shell`, `workdir` and
/// `env`: the handler is the work. Nothing is checked here:
/// [`SchedulerBuilder::start`](crate::SchedulerBuilder::start), [`Scheduler::add`](crate::Scheduler::add) and
/// [`Scheduler::set_jobs`](crate::Scheduler::set_jobs) check each job with the job table's
/// validator and return every problem as [`SchedulerError::Config`](crate::SchedulerError::Config).
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
    spec: JobSpec,
}

impl JobBuilder {
    /// A job named `name` on the cron expression `schedule`, read in UTC
    /// unless [`JobBuilder::timezone`](crate::JobBuilder::timezone) says otherwise. The name is 1 to 128
    /// characters from `A-Z a-z 0-9 _ . -` (it is part of Redis keys). The
    /// schedule is read as cronie reads a crontab: 5 fields (minute, hour,
    /// day of month, month, day of week), 6 with leading seconds, 7 with
    /// seconds and a trailing year; or `@yearly`, `@monthly`, `@weekly`,
    /// `@daily`, `@hourly`; `H` picks a value by a hash of the job's name
    /// (the same on every instance). `@reboot` is refused. The guide's
    /// "Schedules" chapter has the details.
    ///
    /// ```
    /// use cronlease::JobBuilder;
    ///
    /// let every_quarter_hour = JobBuilder::new("sync-stock", "*/15 * * * *");
    /// let nightly_spread = JobBuilder::new("reindex", "H H(1-4) * * *");
    /// let at_seconds = JobBuilder::new("ping", "30 * * * * *");
    /// ```
    pub fn new(name: &str, schedule: &str) -> JobBuilder {
        JobBuilder {
            name: name.to_string(),
            spec: JobSpec {
                schedule: Some(Given::code(Expressions(vec![schedule.to_string()]))),
                ..JobSpec::default()
            },
        }
    }

    /// A job named `name` without a schedule of its own: it runs once for
    /// each outcome of a job of `upstreams` that [`JobBuilder::after_on`]
    /// matches (`after`; by default each run that ended `ok`), or once all
    /// of them ended for the same root tick with [`Join::All`](crate::Join::All). Each
    /// upstream must be a job of the same scheduler, added before this
    /// one, and no chain may lead back to the job. The run knows what
    /// started it: [`Run::upstream`](crate::Run::upstream).
    ///
    /// ```
    /// use cronlease::{JobBuilder, Run};
    ///
    /// let draw = JobBuilder::new("lottery-draw", "0 12 * * *");
    /// let publish = JobBuilder::after("publish-winners", ["lottery-draw"]);
    /// ```
    pub fn after<'a>(name: &str, upstreams: impl IntoIterator<Item = &'a str>) -> JobBuilder {
        JobBuilder {
            name: name.to_string(),
            spec: JobSpec::default(),
        }
        .follows(upstreams)
    }

    /// Runs this job also once for each matching outcome of a job of
    /// `upstreams` (`after`), besides its schedule; see
    /// [`JobBuilder::after`].
    ///
    /// ```
    /// use cronlease::JobBuilder;
    ///
    /// // Nightly, and after every import.
    /// let job = JobBuilder::new("reindex", "0 3 * * *").follows(["import"]);
    /// ```
    pub fn follows<'a>(self, upstreams: impl IntoIterator<Item = &'a str>) -> JobBuilder {
        let upstreams = upstreams
            .into_iter()
            .map(|name| Given::code(name.to_string()))
            .collect();
        self.set(|spec| spec.after = Some(Given::code(upstreams)))
    }

    /// Which outcomes of its upstreams start the job (`after_on`, default
    /// [`AfterOn::Ok`](crate::AfterOn::Ok)).
    ///
    /// ```
    /// use cronlease::{AfterOn, JobBuilder};
    ///
    /// let job = JobBuilder::after("page-on-call", ["settle"]).after_on(AfterOn::Failed);
    /// ```
    pub fn after_on(self, on: crate::AfterOn) -> JobBuilder {
        self.set(|spec| spec.after_on = Some(Given::code(on)))
    }

    /// What a run of the job is given for its parameters (`after_params`,
    /// default [`AfterParams::Defaults`](crate::AfterParams::Defaults)):
    /// with [`AfterParams::Pass`](crate::AfterParams::Pass), the upstream
    /// run's values of the parameters both declare.
    ///
    /// ```
    /// use cronlease::{AfterParams, JobBuilder, ParamSpec};
    ///
    /// let job = JobBuilder::after("publish", ["draw"])
    ///     .param("region", ParamSpec::new("eu"))
    ///     .after_params(AfterParams::Pass);
    /// ```
    pub fn after_params(self, params: crate::AfterParams) -> JobBuilder {
        self.set(|spec| spec.after_params = Some(Given::code(params)))
    }

    /// How the job waits for several upstreams (`after_all`, default
    /// [`Join::Each`](crate::Join::Each): a run for each outcome).
    ///
    /// ```
    /// use cronlease::{Join, JobBuilder};
    ///
    /// let job = JobBuilder::after("report", ["extract-eu", "extract-us"]).join(Join::All);
    /// ```
    pub fn join(self, join: crate::Join) -> JobBuilder {
        self.set(|spec| spec.after_all = Some(Given::code(join == crate::Join::All)))
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
        self.set(|spec| spec.timezone = Some(Given::code(zone.to_string())))
    }

    /// Another cron expression the job also fires at (`schedule = [...]`):
    /// its ticks are the union of its expressions, and an instant two of
    /// them share is one tick. Each keeps its own `H` and daylight-saving
    /// reading; all are read in the job's [`timezone`](JobBuilder::timezone).
    /// On a job made with [`JobBuilder::after`], the first expression
    /// gives it a schedule besides its upstreams.
    ///
    /// ```
    /// // Noon on weekdays and 20:00 on Saturdays.
    /// let draw = cronlease::JobBuilder::new("lottery-draw", "0 12 * * 1-5")
    ///     .also_at("0 20 * * 6")
    ///     .timezone("Asia/Shanghai");
    /// ```
    pub fn also_at(self, expression: &str) -> JobBuilder {
        self.set(|spec| match &mut spec.schedule {
            Some(given) => given.get_mut().0.push(expression.to_string()),
            None => spec.schedule = Some(Given::code(Expressions(vec![expression.to_string()]))),
        })
    }

    /// The first instant the job's schedule may fire at (`active_from`):
    /// earlier ticks are not ticks of the job.
    ///
    /// ```
    /// let start: jiff::Timestamp = "2026-12-01T00:00:00+08:00".parse().unwrap();
    /// let promotion = cronlease::JobBuilder::new("lottery-draw", "0 12 * * *").active_from(start);
    /// ```
    pub fn active_from(self, from: jiff::Timestamp) -> JobBuilder {
        self.set(|spec| spec.active_from = Some(Given::code(Moment::at(from))))
    }

    /// The instant the job's schedule stops firing (`active_until`, not
    /// included): ticks at or after it are not ticks of the job. Must be
    /// after [`active_from`](JobBuilder::active_from).
    ///
    /// ```
    /// let end: jiff::Timestamp = "2027-01-01T00:00:00+08:00".parse().unwrap();
    /// let promotion = cronlease::JobBuilder::new("lottery-draw", "0 12 * * *").active_until(end);
    /// ```
    pub fn active_until(self, until: jiff::Timestamp) -> JobBuilder {
        self.set(|spec| spec.active_until = Some(Given::code(Moment::at(until))))
    }

    /// How many ticks of the schedule may start a run in the job's whole
    /// life across the cluster (`max_runs`, 1 to 1,000,000,000). The count
    /// is kept in Redis by the claim itself, so however many instances run
    /// the job, the run after the last one allowed never starts; the job's
    /// loop then ends. Manual triggers and runs started by upstreams are
    /// not counted.
    ///
    /// ```
    /// let trial = cronlease::JobBuilder::new("trial-report", "0 9 * * *").max_runs(30);
    /// ```
    pub fn max_runs(self, runs: u32) -> JobBuilder {
        self.set(|spec| spec.max_runs = Some(Given::code(i64::from(runs))))
    }

    /// What a tick does while a run of the job is in flight (`overlap`,
    /// default [`Overlap::Skip`]).
    ///
    /// ```
    /// use cronlease::{JobBuilder, Overlap};
    /// let job = JobBuilder::new("export", "*/5 * * * *").overlap(Overlap::Replace);
    /// ```
    pub fn overlap(self, overlap: Overlap) -> JobBuilder {
        self.set(|spec| spec.overlap = Some(overlap))
    }

    /// Runs the job only on instances that have every one of `tags`
    /// (`run_on`; see [`SchedulerBuilder::tag`](crate::SchedulerBuilder::tag)):
    /// the others never start a run of it, and a tick no live instance
    /// matches is recorded missed with the reason `no_matching_replica`.
    ///
    /// ```
    /// let job = cronlease::JobBuilder::new("train", "0 * * * *").run_on(["gpu"]);
    /// ```
    pub fn run_on<'t>(self, tags: impl IntoIterator<Item = &'t str>) -> JobBuilder {
        let tags = tags
            .into_iter()
            .map(|tag| Given::code(tag.to_string()))
            .collect();
        self.set(|spec| spec.run_on = Some(Given::code(tags)))
    }

    /// How many runs a tick makes (`mode`, default [`Mode::One`]):
    /// [`Mode::EveryReplica`] runs each tick once on every live instance
    /// that matches the job's [`JobBuilder::run_on`].
    ///
    /// ```
    /// use cronlease::{JobBuilder, Mode};
    /// let job = JobBuilder::new("clean-cache", "*/10 * * * *").mode(Mode::EveryReplica);
    /// ```
    pub fn mode(self, mode: Mode) -> JobBuilder {
        self.set(|spec| spec.mode = Some(Given::code(mode)))
    }

    /// What becomes of ticks missed while no instance could claim them
    /// (`misfire`, default [`Misfire::RunOnce`]).
    ///
    /// ```
    /// use cronlease::{JobBuilder, Misfire};
    /// let job = JobBuilder::new("invoice", "0 * * * *").misfire(Misfire::RunAll);
    /// ```
    pub fn misfire(self, misfire: Misfire) -> JobBuilder {
        self.set(|spec| spec.misfire = Some(misfire))
    }

    /// How old a missed tick may be and still run after an outage
    /// (`misfire_grace`, default 5 min, at most 7 days).
    ///
    /// ```
    /// use std::time::Duration;
    /// let job = cronlease::JobBuilder::new("invoice", "0 * * * *").misfire_grace(Duration::from_secs(3600));
    /// ```
    pub fn misfire_grace(self, grace: Duration) -> JobBuilder {
        self.set(|spec| spec.misfire_grace = Some(duration(grace)))
    }

    /// How long one attempt may run (`timeout`, default none, at most 7
    /// days). Then [`Run::stopped`](crate::Run::stopped) resolves with [`Stop::Timeout`](crate::Stop::Timeout), the
    /// handler has the scheduler's `kill_grace` to end and is dropped
    /// after it; the attempt is `timeout`, and retried if retries are
    /// left.
    ///
    /// ```
    /// use std::time::Duration;
    /// let job = cronlease::JobBuilder::new("report", "0 6 * * *").timeout(Duration::from_secs(600));
    /// ```
    pub fn timeout(self, timeout: Duration) -> JobBuilder {
        self.set(|spec| spec.timeout = Some(duration(timeout)))
    }

    /// Extra attempts after a failed or timed-out one, under the same
    /// claim and fence (`retries`, default 0, at most 100).
    /// [`Run::attempt`](crate::Run::attempt) counts them.
    ///
    /// ```
    /// let job = cronlease::JobBuilder::new("report", "0 6 * * *").retries(3);
    /// ```
    pub fn retries(self, retries: u32) -> JobBuilder {
        self.set(|spec| spec.retries = Some(Given::code(i64::from(retries))))
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
        self.set(|spec| spec.retry_backoff = Some(duration(backoff)))
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
        self.set(|spec| spec.dst_gap = Some(Given::code(policy)))
    }

    /// What a local time that a daylight-saving change repeats does
    /// (`dst_repeat`, default [`DstRepeat::First`]). Only for fixed-time
    /// schedules, like [`JobBuilder::dst_gap`](crate::JobBuilder::dst_gap).
    ///
    /// ```
    /// use cronlease::{DstRepeat, JobBuilder};
    /// let job = JobBuilder::new("meter-reading", "30 1 * * *")
    ///     .timezone("America/New_York")
    ///     .dst_repeat(DstRepeat::Both);
    /// ```
    pub fn dst_repeat(self, policy: DstRepeat) -> JobBuilder {
        self.set(|spec| spec.dst_repeat = Some(Given::code(policy)))
    }

    /// What becomes of a run whose instance died before recording an
    /// outcome (`on_holder_lost`, default [`OnHolderLost::Record`](crate::OnHolderLost::Record)).
    /// [`OnHolderLost::Rerun`](crate::OnHolderLost::Rerun) is refused with [`RedisSettings::quorum`](crate::RedisSettings::quorum).
    ///
    /// ```
    /// use cronlease::{JobBuilder, OnHolderLost};
    /// let job = JobBuilder::new("settle", "0 3 * * *").on_holder_lost(OnHolderLost::Rerun);
    /// ```
    pub fn on_holder_lost(self, policy: OnHolderLost) -> JobBuilder {
        self.set(|spec| spec.on_holder_lost = Some(policy))
    }

    /// The channels this job's events go to (`notify`: names given to
    /// [`SchedulerBuilder::channel`](crate::SchedulerBuilder::channel)),
    /// instead of the scheduler's
    /// [`SchedulerBuilder::notify`](crate::SchedulerBuilder::notify); an
    /// empty list: none.
    ///
    /// ```
    /// let job = cronlease::JobBuilder::new("noon", "0 12 * * *").notify(&["ops", "mail"]);
    /// ```
    #[cfg(feature = "notify")]
    pub fn notify(self, channels: &[&str]) -> JobBuilder {
        let names = channels
            .iter()
            .map(|c| Given::code(c.to_string()))
            .collect();
        self.set(|spec| spec.notify = Some(Given::code(names)))
    }

    /// The events this job's channels are told about (`notify_on`;
    /// default: the scheduler's, else all but
    /// [`EventKind::Late`](crate::EventKind::Late), which needs
    /// [`JobBuilder::late_after`], and
    /// [`EventKind::ReplicaDead`](crate::EventKind::ReplicaDead), which is
    /// the scheduler's). [`EventKind::Overdue`](crate::EventKind::Overdue)
    /// needs [`JobBuilder::expect_success_within`].
    ///
    /// ```
    /// use cronlease::{EventKind, JobBuilder};
    /// let job = JobBuilder::new("noon", "0 12 * * *")
    ///     .notify(&["ops"])
    ///     .notify_on([EventKind::Failed, EventKind::Timeout, EventKind::Recovered]);
    /// ```
    #[cfg(feature = "notify")]
    pub fn notify_on(self, events: impl IntoIterator<Item = crate::EventKind>) -> JobBuilder {
        let names = events
            .into_iter()
            .map(|e| Given::code(e.as_str().to_string()))
            .collect();
        self.set(|spec| spec.notify_on = Some(Given::code(names)))
    }

    /// A run that starts more than this after its tick is `late`
    /// (`late_after`, at most 7 days; default: the scheduler's, else
    /// none). Setting it adds [`EventKind::Late`](crate::EventKind::Late)
    /// to the default events.
    ///
    /// ```
    /// use std::time::Duration;
    /// let job = cronlease::JobBuilder::new("noon", "0 12 * * *").late_after(Duration::from_secs(120));
    /// ```
    #[cfg(feature = "notify")]
    pub fn late_after(self, late_after: Duration) -> JobBuilder {
        self.set(|spec| spec.late_after = Some(duration(late_after)))
    }

    /// The dead man's switch (`expect_success_within`, at most 400
    /// days): no `ok` outcome for this long is
    /// [`EventKind::Overdue`](crate::EventKind::Overdue).
    ///
    /// ```
    /// use std::time::Duration;
    /// let job = cronlease::JobBuilder::new("backup", "0 3 * * *")
    ///     .expect_success_within(Duration::from_secs(26 * 3600));
    /// ```
    #[cfg(feature = "notify")]
    pub fn expect_success_within(self, within: Duration) -> JobBuilder {
        self.set(|spec| spec.expect_success_within = Some(duration(within)))
    }

    /// While the job keeps failing, at most one reminder per this
    /// (`repeat_every`, default: the scheduler's, else 1 h; at most 7
    /// days).
    ///
    /// ```
    /// use std::time::Duration;
    /// let job = cronlease::JobBuilder::new("sync", "*/5 * * * *").repeat_every(Duration::from_secs(4 * 3600));
    /// ```
    #[cfg(feature = "notify")]
    pub fn repeat_every(self, every: Duration) -> JobBuilder {
        self.set(|spec| spec.repeat_every = Some(duration(every)))
    }

    /// The job with its handler: an async function of the [`Run`](crate::Run) that
    /// returns `Ok(())` (the attempt is `ok`) or an error (`failed`, with
    /// the error and its sources in the outcome's output, as `cronlease
    /// history --output` shows it). A panic is `failed` with its message,
    /// and the scheduler goes on. The handler is called once per attempt,
    /// on the scheduler's runtime; it should watch [`Run::stopped`](crate::Run::stopped).
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
    pub fn run<F, Fut, E>(self, handler: F) -> Job
    where
        F: Fn(Run) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), E>> + Send + 'static,
        E: Into<Box<dyn StdError + Send + Sync>> + 'static,
    {
        Job {
            name: self.name,
            spec: self.spec,
            handler: Arc::new(Handler { handler }),
        }
    }

    /// Declares a parameter of the job (`params`): an input a manual run
    /// may give ([`Scheduler::trigger`](crate::Scheduler::trigger),
    /// `cronlease trigger --param name=value`, the dashboard's Run now
    /// form) and the handler reads with [`Run::param`](crate::Run::param).
    /// Every tick of the schedule runs with the default. The name is 1 to
    /// 64 characters from `a-z 0-9 _`; declaring a name again replaces
    /// it. Checked with the job, as a job table's `params` is.
    ///
    /// ```
    /// use cronlease::{JobBuilder, ParamSpec, Run};
    ///
    /// let job = JobBuilder::new("reindex", "0 4 * * *")
    ///     .param("index", ParamSpec::new("products").allowed(&["products", "orders"]))
    ///     .param("batch", ParamSpec::new("500"))
    ///     .run(|run: Run| async move {
    ///         println!("reindexing {:?} in batches of {:?}", run.param("index"), run.param("batch"));
    ///         Ok::<(), std::io::Error>(())
    ///     });
    /// ```
    pub fn param(self, name: &str, param: ParamSpec) -> JobBuilder {
        self.set(|spec| {
            spec.params
                .insert(Given::code(name.to_string()), Given::code(param.raw));
        })
    }

    /// Leaves out the ticks inside an event of `calendar` (`exclude`):
    /// each is recorded `excluded` with the calendar's name instead of
    /// run, once, by whichever instance claims it. May be called for
    /// several calendars; a tick inside any of them is left out.
    ///
    /// ```
    /// use cronlease::{Calendar, JobBuilder};
    /// use jiff::civil::date;
    ///
    /// let holidays = Calendar::from_dates(
    ///     "holidays-cn",
    ///     [date(2026, 10, 1), date(2026, 10, 2)],
    ///     "Asia/Shanghai",
    /// )?;
    /// let job = JobBuilder::new("lottery-draw", "0 12 * * 1-5")
    ///     .timezone("Asia/Shanghai")
    ///     .exclude(holidays);
    /// # Ok::<(), cronlease::CalendarError>(())
    /// ```
    pub fn exclude(self, calendar: Calendar) -> JobBuilder {
        self.calendar(calendar, |spec| &mut spec.exclude)
    }

    /// Runs only the ticks inside an event of `calendar` (`only`); the
    /// others are recorded `excluded`, outside it. With several `only`
    /// calendars, a tick inside any one of them runs. [`JobBuilder::exclude`]
    /// wins over it.
    ///
    /// ```
    /// use cronlease::{Calendar, JobBuilder};
    ///
    /// let text = "BEGIN:VCALENDAR\r\nBEGIN:VEVENT\r\n\
    ///             DTSTART;TZID=Asia/Shanghai:20260105T093000\r\n\
    ///             DTEND;TZID=Asia/Shanghai:20260105T150000\r\n\
    ///             RRULE:FREQ=WEEKLY;BYDAY=MO,TU,WE,TH,FR\r\nEND:VEVENT\r\nEND:VCALENDAR\r\n";
    /// let trading = Calendar::from_ics("trading-hours", text, "Asia/Shanghai")?;
    /// let job = JobBuilder::new("quote-snapshot", "*/5 * * * *").only(trading);
    /// # Ok::<(), cronlease::CalendarError>(())
    /// ```
    pub fn only(self, calendar: Calendar) -> JobBuilder {
        self.calendar(calendar, |spec| &mut spec.only)
    }

    /// Names `calendar` in the list `field` picks, and keeps it with the
    /// job for the validator to find.
    fn calendar(
        self,
        calendar: Calendar,
        field: impl FnOnce(&mut JobSpec) -> &mut Option<Given<Vec<Given<String>>>>,
    ) -> JobBuilder {
        self.set(|spec| {
            let names = field(spec).get_or_insert_with(|| Given::code(Vec::new()));
            let mut list = names.get().clone();
            list.push(Given::code(calendar.name().to_string()));
            *names = Given::code(list);
            if !spec.calendars.iter().any(|c| c.name() == calendar.name()) {
                spec.calendars.push(calendar);
            }
        })
    }

    fn set(mut self, setting: impl FnOnce(&mut JobSpec)) -> JobBuilder {
        setting(&mut self.spec);
        self
    }
}

/// A parameter of a job ([`JobBuilder::param`](crate::JobBuilder::param)):
/// its default, and the values it may take.
///
/// Values are strings of at most 1024 bytes without control characters.
/// Nothing is checked here: the job is checked when it is scheduled, as a
/// job table's `params` is (a default not in `allowed` is a problem of the
/// job's field `params.<name>`).
///
/// ```
/// use cronlease::ParamSpec;
///
/// let any_note = ParamSpec::new("");
/// let region = ParamSpec::new("eu").allowed(&["eu", "us", "ap"]);
/// ```
#[derive(Debug, Clone)]
pub struct ParamSpec {
    raw: RawParam,
}

impl ParamSpec {
    /// A parameter whose default is `default`: what every tick of the
    /// schedule, and a manual run that does not give the parameter, runs
    /// with.
    ///
    /// ```
    /// let batch = cronlease::ParamSpec::new("500");
    /// ```
    pub fn new(default: &str) -> ParamSpec {
        ParamSpec {
            raw: RawParam {
                default: Some(Given::code(default.to_string())),
                allowed: None,
            },
        }
    }

    /// The only values a run may give the parameter; the default must be
    /// one of them. Without it, any value.
    ///
    /// ```
    /// let region = cronlease::ParamSpec::new("eu").allowed(&["eu", "us"]);
    /// ```
    pub fn allowed(mut self, values: &[&str]) -> ParamSpec {
        let values = values.iter().map(|v| Given::code(v.to_string())).collect();
        self.raw.allowed = Some(Given::code(values));
        self
    }
}

/// A duration given by code, as the job's definition holds it.
fn duration(d: Duration) -> Given<DurationValue> {
    Given::code(DurationValue::Exact(d))
}

/// A job with its handler ([`JobBuilder::run`](crate::JobBuilder::run)), ready for
/// [`SchedulerBuilder::job`](crate::SchedulerBuilder::job), [`Scheduler::add`](crate::Scheduler::add) or [`Scheduler::set_jobs`](crate::Scheduler::set_jobs).
/// Cheap to clone: clones share the handler.
///
/// ```
/// use cronlease::{Job, JobBuilder, Run};
///
/// fn jobs() -> Vec<Job> {
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
pub struct Job {
    pub(super) name: String,
    pub(super) spec: JobSpec,
    pub(super) handler: Arc<dyn Task>,
}

impl Job {
    /// The job's name, as given to [`JobBuilder::new`](crate::JobBuilder::new).
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

impl std::fmt::Debug for Job {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Job")
            .field("name", &self.name)
            .field("settings", &self.spec)
            .finish_non_exhaustive()
    }
}
