//! What a handler is given ([`Run`](crate::Run)), and the task that runs a handler's
//! future under the engine's stop signal.

use super::StdError;
use crate::live::Source;
use crate::outcome::Status;
use crate::outcome::Tail;
use crate::task::Attempt;
use crate::task::AttemptEnd;
use crate::task::RunContext;
use crate::task::Stop;
use crate::task::StopSignal;
use crate::task::Task;
use std::time::Duration;

/// What a handler is given, once per attempt: which job and tick it runs,
/// its fence, and the signal to stop ([`Run::stopped`](crate::Run::stopped)).
///
/// ```
/// use cronlease::{JobBuilder, Run};
///
/// # async fn draw_winners(tick: jiff::Timestamp, fence: u64) -> Result<(), std::io::Error> { Ok(()) }
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

    /// The tick this run is for: the schedule's time, not the moment the
    /// run started (a missed tick run late keeps its time). For a manual
    /// run (`cronlease trigger`), the time it was requested. A
    /// [`jiff::Timestamp`]: an instant, to be seen in a time zone with
    /// [`Timestamp::to_zoned_datetime`](jiff::Timestamp::to_zoned_datetime).
    ///
    /// ```
    /// use cronlease::{JobBuilder, Run};
    /// use jiff::tz::TimeZone;
    ///
    /// let job = JobBuilder::new("report", "0 6 * * *").run(|run: Run| async move {
    ///     let day = run.tick().to_zoned_datetime(TimeZone::UTC).date(); // the day this report is for
    ///     let tick_ms: i64 = run.tick().as_millisecond(); // as a number, e.g. for a row key
    ///     Ok::<(), std::io::Error>(())
    /// });
    /// ```
    pub fn tick(&self) -> jiff::Timestamp {
        jiff::Timestamp::from_millisecond(self.context.tick_ms).unwrap_or_default()
    }

    /// What started this run when the job follows others (`after`): the
    /// upstream run or runs and the tick that began the chain; None for a
    /// run of the job's own schedule or a manual one.
    ///
    /// ```
    /// use cronlease::{JobBuilder, Run};
    ///
    /// let job = JobBuilder::after("publish-winners", ["lottery-draw"]).run(|run: Run| async move {
    ///     let upstream = run.upstream().expect("a follower's run has an upstream");
    ///     println!("publishing the draw of {}", upstream.root_tick());
    ///     Ok::<(), std::io::Error>(())
    /// });
    /// ```
    pub fn upstream(&self) -> Option<&crate::Upstream> {
        self.context.upstream.as_deref()
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

    /// The run's W3C trace context, a `traceparent` value
    /// (`00-<trace id>-<span id>-<flags>`) whose parent is the run's span
    /// (`cronlease.run`), for requests and messages the handler sends
    /// outside this process; None unless the service's subscriber has a
    /// `tracing-opentelemetry` layer and the crate's `otel` feature is on.
    /// The handler's future runs inside the run's span: its own `tracing`
    /// spans are children of it without this.
    ///
    /// ```
    /// use cronlease::{JobBuilder, Run};
    /// let job = JobBuilder::new("report", "0 6 * * *").run(|run: Run| async move {
    ///     if let Some(traceparent) = run.traceparent() {
    ///         println!("send it on as the traceparent header: {traceparent}");
    ///     }
    ///     Ok::<(), std::io::Error>(())
    /// });
    /// ```
    pub fn traceparent(&self) -> Option<&str> {
        self.context.trace.as_ref().map(|t| t.as_str())
    }

    /// 1 for the first attempt, 2 for the first retry, … (see
    /// [`JobBuilder::retries`](crate::JobBuilder::retries)).
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

    /// What started this run: a tick of the schedule, a missed one caught
    /// up, a rerun, a manual run, an upstream's outcome, or a backfill of a
    /// past tick (`cronlease backfill`, whose [`Run::tick`] is that tick).
    ///
    /// ```
    /// use cronlease::{JobBuilder, Run, Trigger};
    /// let job = JobBuilder::new("report", "0 6 * * *").run(|run: Run| async move {
    ///     if run.trigger() == Trigger::Backfill {
    ///         println!("re-running the report of {}", run.tick());
    ///     }
    ///     Ok::<(), std::io::Error>(())
    /// });
    /// ```
    pub fn trigger(&self) -> crate::Trigger {
        self.context.trigger
    }

    /// The instance running it: the scheduler's replica id
    /// ([`SchedulerBuilder::replica_id`](crate::SchedulerBuilder::replica_id)).
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

    /// The value of the job's parameter `name` for this run (see
    /// [`JobBuilder::param`](crate::JobBuilder::param)): the one given to
    /// the manual run that asked for it (`cronlease trigger --param`, the
    /// dashboard, [`Scheduler::trigger`](crate::Scheduler::trigger)), else
    /// the parameter's default, which is what every tick of the schedule
    /// runs with. `None` for a name the job does not declare.
    ///
    /// ```
    /// use cronlease::{JobBuilder, ParamSpec, Run};
    ///
    /// # async fn export(region: &str) -> Result<(), std::io::Error> { Ok(()) }
    /// let job = JobBuilder::new("export", "0 3 * * *")
    ///     .param("region", ParamSpec::new("eu").allowed(&["eu", "us"]))
    ///     .run(|run: Run| async move {
    ///         let region = run.param("region").unwrap_or("eu");
    ///         export(region).await
    ///     });
    /// ```
    pub fn param(&self, name: &str) -> Option<&str> {
        self.context.params.get(name).map(String::as_str)
    }

    /// Resolves when the run must stop, with the reason: the lease is lost
    /// ([`Stop::LostLease`](crate::Stop::LostLease)), the job's timeout passed ([`Stop::Timeout`](crate::Stop::Timeout)),
    /// or the scheduler is shutting down ([`Stop::Shutdown`](crate::Stop::Shutdown)). From then
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

    /// A writer for the run's live output: each line written to it is
    /// shown while the run runs by `cronlease logs JOB --follow` and the
    /// dashboard's job page, on any host (each line cut to 2 KiB; the
    /// newest 1,000 lines are kept until a minute after the run). Never
    /// waits on Redis: a line written faster than it can be sent is left
    /// out, and the output says how many were. A line without its newline
    /// is shown when the writer is flushed or dropped. Lines written after
    /// the run ended go nowhere.
    ///
    /// ```
    /// use cronlease::{JobBuilder, Run};
    /// use std::io::Write;
    ///
    /// let job = JobBuilder::new("import", "0 2 * * *").run(|run: Run| async move {
    ///     let mut out = run.output();
    ///     for batch in 1..=3 {
    ///         writeln!(out, "imported batch {batch}")?;
    ///     }
    ///     Ok::<(), std::io::Error>(())
    /// });
    /// ```
    pub fn output(&self) -> RunOutput {
        RunOutput {
            lines: self.context.live.clone(),
            partial: Vec::new(),
        }
    }
}

/// A run's live output, as [`Run::output`] gives it: an
/// [`std::io::Write`] whose lines are shown while the run runs.
///
/// ```
/// use cronlease::{JobBuilder, Run};
/// use std::io::Write;
///
/// let job = JobBuilder::new("report", "0 6 * * *").run(|run: Run| async move {
///     let mut out = run.output();
///     write!(out, "rows: ")?;
///     writeln!(out, "{}", 42)?; // one line: "rows: 42"
///     Ok::<(), std::io::Error>(())
/// });
/// ```
#[derive(Debug)]
pub struct RunOutput {
    lines: crate::live::LiveLines,
    partial: Vec<u8>,
}

/// An async function as a task.
pub(super) struct Handler<F> {
    pub(super) handler: F,
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
        #[cfg(feature = "tracing-layer")]
        if crate::live::layer::wanted() {
            let work = crate::live::layer::in_handler(run.live.clone(), work);
            return Box::pin(supervise(work, stop, run.grace, output));
        }
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

impl std::io::Write for RunOutput {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let mut rest = buf;
        while let Some(newline) = rest.iter().position(|&b| b == b'\n') {
            if self.partial.is_empty() {
                self.lines.push(Source::Handler, &rest[..newline]);
            } else {
                self.partial.extend_from_slice(&rest[..newline]);
                self.lines.push(Source::Handler, &self.partial);
                self.partial.clear();
            }
            rest = &rest[newline + 1..];
        }
        // A line longer than any kept is cut here, not held whole.
        let room = crate::live::MAX_LINE_BYTES.saturating_sub(self.partial.len());
        self.partial
            .extend_from_slice(&rest[..rest.len().min(room)]);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        if !self.partial.is_empty() {
            self.lines.push(Source::Handler, &self.partial);
            self.partial.clear();
        }
        Ok(())
    }
}

impl Drop for RunOutput {
    fn drop(&mut self) {
        let _ = std::io::Write::flush(self);
    }
}
