//! What became of a run: the record that ends every claimed tick.
//!
//! An [`Outcome`] is built by the daemon when a run ends, written to the job's
//! Redis stream by the finish script, or spooled to disk (it is
//! serde-serializable) when Redis cannot take it now. The stream's field names
//! are defined here once, in [`Outcome::stream_fields`].

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

/// How a run (or a tick that was not run) ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "dashboard", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// The command exited 0.
    Ok,
    /// The command exited non-zero, was killed by a signal, or could not start.
    Failed,
    /// The command ran past the job's `timeout` and was stopped.
    Timeout,
    /// The lease was lost (taken over, or not renewable in time); the run was
    /// killed at once.
    LostLease,
    /// The replica shut down and the run did not finish within the grace.
    Interrupted,
    /// The replica holding the run died; recorded by another replica.
    Abandoned,
    /// An operator stopped the run (`cronlease kill`, the dashboard's
    /// Kill button): its process group got SIGTERM, then SIGKILL after
    /// `kill_grace` (a handler: [`Stop::Killed`](crate::Stop::Killed)).
    /// Who asked is in the record's `killed_by`. Never retried nor rerun;
    /// no notification (the operator knows); a follower whose `after_on`
    /// is `failed` or `any` runs after it, as after `interrupted`.
    Killed,
    /// The tick came while a run of the job was in flight (`overlap = "skip"`).
    SkippedOverlap,
    /// The claim won, but fewer Redis replicas than `min_replicas_ack`
    /// acknowledged it within `ack_timeout`: not run.
    NotDurable,
    /// Nobody claimed the tick in time (every replica down, paused or
    /// late); recorded by the replica whose claim later moved past it
    /// (`missed.lua`).
    Missed,
    /// The job's calendars leave the tick out (`exclude`, `only`): not
    /// run, recorded once by the replica that claimed it (or, for a tick
    /// nobody claimed in time, by the one whose claim moved past it),
    /// with the calendar in the record's `calendar` and `calendar_rule`.
    Excluded,
    /// No replica had room for the tick within its grace (each had its
    /// `[daemon] max_runs` in flight), or its job's concurrency group no
    /// slot: not run, recorded once, with the record's `reason`
    /// (`capacity` or `group`) and, for a group, `group`.
    SkippedCapacity,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Failed => "failed",
            Status::Timeout => "timeout",
            Status::LostLease => "lost_lease",
            Status::Interrupted => "interrupted",
            Status::Abandoned => "abandoned",
            Status::Killed => "killed",
            Status::SkippedOverlap => "skipped_overlap",
            Status::NotDurable => "not_durable",
            Status::Missed => "missed",
            Status::Excluded => "excluded",
            Status::SkippedCapacity => "skipped_capacity",
        }
    }
}

impl Status {
    /// Every status, in the order of the enum.
    pub const ALL: [Status; 12] = [
        Status::Ok,
        Status::Failed,
        Status::Timeout,
        Status::LostLease,
        Status::Interrupted,
        Status::Abandoned,
        Status::Killed,
        Status::SkippedOverlap,
        Status::NotDurable,
        Status::Missed,
        Status::Excluded,
        Status::SkippedCapacity,
    ];

    /// The status named `text` as Redis stores it (`ok`, `lost_lease`, …).
    pub fn parse(text: &str) -> Option<Status> {
        Status::ALL.into_iter().find(|s| s.as_str() == text)
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What started a run ([`Run::trigger`](crate::Run::trigger)), stored
/// in its outcome as `trigger` and given to a process as
/// `CRONLEASE_TRIGGER`.
///
/// ```
/// use cronlease::Trigger;
/// assert_eq!(Trigger::Backfill.as_str(), "backfill");
/// assert_eq!(Trigger::parse("schedule"), Some(Trigger::Schedule));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "dashboard", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Trigger {
    /// Its time came while replicas were up.
    Schedule,
    /// It was missed (outage, no replica up) and caught up per `misfire`.
    Misfire,
    /// Its first holder died and `on_holder_lost = "rerun"` ran it again.
    Rerun,
    /// An operator asked for it (`cronlease trigger`); not a tick of the
    /// schedule.
    Manual,
    /// An upstream's outcome started it (`after`); its tick is when that
    /// outcome was recorded.
    Chain,
    /// An operator asked for a past tick of the schedule to run once
    /// (`cronlease backfill`); its tick is that tick.
    Backfill,
}

impl Trigger {
    /// The trigger named `text` as Redis stores it (`schedule`, …).
    pub fn parse(text: &str) -> Option<Trigger> {
        [
            Trigger::Schedule,
            Trigger::Misfire,
            Trigger::Rerun,
            Trigger::Manual,
            Trigger::Chain,
            Trigger::Backfill,
        ]
        .into_iter()
        .find(|t| t.as_str() == text)
    }

    /// The name Redis stores, the inverse of [`Trigger::parse`].
    pub fn as_str(self) -> &'static str {
        match self {
            Trigger::Schedule => "schedule",
            Trigger::Misfire => "misfire",
            Trigger::Rerun => "rerun",
            Trigger::Manual => "manual",
            Trigger::Chain => "chain",
            Trigger::Backfill => "backfill",
        }
    }
}

/// The record of one finished run, as the holder writes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Outcome {
    pub job: String,
    /// The tick, ms since the Unix epoch (UTC).
    pub tick_ms: i64,
    pub fence: u64,
    pub run_id: String,
    pub replica: String,
    pub host: String,
    /// When the run was claimed and when it ended, by the Redis clock
    /// (as estimated by the replica), ms since the epoch.
    pub started_ms: i64,
    pub finished_ms: i64,
    pub status: Status,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    /// How many times the command was started (1 + retries used).
    pub attempts: u32,
    /// The last bytes of the run's stdout and stderr.
    pub output: String,
    pub trigger: Trigger,
    /// The lease key the run held, so the finish script can release it.
    pub lease_key: String,
    /// CPU time (user and system) of the run's processes, every attempt
    /// together: all that were in its cgroup, or without one the command's
    /// process and the descendants it waited for. None where nothing was
    /// measured (a handler, no attempt started), and in spool files written
    /// before it existed.
    #[serde(default)]
    pub cpu_ms: Option<u64>,
    /// Peak memory of the run (the highest of its attempts'): its cgroup's
    /// `memory.peak` where the memory controller gives one, else the
    /// largest resident set of any one of its waited-for processes
    /// (`ru_maxrss`), not their sum, and never below the replica's own
    /// peak resident set, which the command's process shared until its
    /// `exec` (the guide, "Runs and their processes").
    #[serde(default)]
    pub peak_memory_kb: Option<u64>,
    /// Processes of the run the kernel's OOM killer killed (`memory_max`).
    #[serde(default)]
    pub oom_kills: Option<u64>,
    /// A follower's run: the upstream runs it follows. Shared with the
    /// run's context; none for every other run, and in spool files
    /// written before chains existed.
    #[serde(default)]
    pub upstream: Option<std::sync::Arc<Upstream>>,
    /// The values of the run's parameters (the job's `params`) by name:
    /// every parameter of its job, defaults included. Empty for a job
    /// without any, and in spool files written before they existed.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub params: BTreeMap<String, String>,
}

impl Outcome {
    /// The stream entry's fields, in order (the finish script adds `stale`).
    #[cfg(any(test, feature = "internals"))]
    pub fn stream_fields(&self) -> Vec<(String, String)> {
        let mut fields = Vec::with_capacity(16);
        self.each_stream_field(|name, value| fields.push((name.to_string(), value.to_string())));
        fields
    }

    /// Hands `field` each of [`Outcome::stream_fields`], name and value,
    /// without a `String` per value: the finish writes them straight into
    /// its command. Each parameter is a field `param.<name>`, last; one
    /// whose name or value is not one a job could have (a spool file is
    /// read from disk) is left out.
    pub fn each_stream_field(&self, mut field: impl FnMut(&str, &dyn std::fmt::Display)) {
        field("tick", &self.tick_ms);
        field("fence", &self.fence);
        field("run_id", &self.run_id);
        field("replica", &self.replica);
        field("host", &self.host);
        field("started_ms", &self.started_ms);
        field("finished_ms", &self.finished_ms);
        field(
            "duration_ms",
            &self.finished_ms.saturating_sub(self.started_ms).max(0),
        );
        field("status", &self.status.as_str());
        if let Some(code) = self.exit_code {
            field("exit_code", &code);
        }
        if let Some(signal) = self.signal {
            field("signal", &signal);
        }
        field("attempts", &self.attempts);
        if let Some(cpu_ms) = self.cpu_ms {
            field("cpu_ms", &cpu_ms);
        }
        if let Some(kb) = self.peak_memory_kb {
            field("peak_memory_kb", &kb);
        }
        if let Some(kills) = self.oom_kills {
            field("oom_kills", &kills);
        }
        field("output", &self.output);
        field("trigger", &self.trigger.as_str());
        if let Some(upstream) = &self.upstream {
            upstream.each_stream_field(&mut field);
        }
        for (name, value) in &self.params {
            if crate::config::is_param_name(name)
                && crate::config::param_value_problem(value).is_none()
            {
                field(
                    &format!("{}{name}", crate::config::PARAM_FIELD_PREFIX),
                    value,
                );
            }
        }
    }
}

/// What started a follower's run (a job with `after`): the run or runs of
/// its upstreams whose outcomes it follows, and the tick that began the
/// chain ([`Run::upstream`](crate::Run::upstream)).
///
/// ```
/// use cronlease::{JobBuilder, Run};
///
/// let job = JobBuilder::after("publish", ["draw"]).run(|run: Run| async move {
///     if let Some(upstream) = run.upstream() {
///         for up in upstream.runs() {
///             println!("{} run {} ended {}", up.job(), up.run_id(), up.status());
///         }
///         println!("the chain began at {}", upstream.root_tick());
///     }
///     Ok::<(), std::io::Error>(())
/// });
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "dashboard", derive(utoipa::ToSchema))]
pub struct Upstream {
    root_tick_ms: i64,
    runs: Vec<UpstreamRun>,
}

/// One upstream run a follower's run follows ([`Upstream::runs`]).
///
/// ```
/// use cronlease::Run;
///
/// fn caused_by(run: &Run) -> Vec<String> {
///     run.upstream()
///         .map(|u| u.runs().iter().map(|r| format!("{}/{}", r.job(), r.run_id())).collect())
///         .unwrap_or_default()
/// }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "dashboard", derive(utoipa::ToSchema))]
pub struct UpstreamRun {
    job: String,
    run_id: String,
    status: Status,
}

impl Upstream {
    /// The tick of the run that began the chain: the scheduled (or
    /// triggered) run at its head, however many jobs lie between.
    ///
    /// ```
    /// use cronlease::Run;
    ///
    /// fn day_of(run: &Run) -> Option<jiff::civil::Date> {
    ///     let root = run.upstream()?.root_tick();
    ///     Some(root.to_zoned_datetime(jiff::tz::TimeZone::UTC).date())
    /// }
    /// ```
    pub fn root_tick(&self) -> jiff::Timestamp {
        jiff::Timestamp::from_millisecond(self.root_tick_ms).unwrap_or_default()
    }

    /// The root tick, ms since the epoch.
    ///
    /// ```
    /// use cronlease::Run;
    ///
    /// fn root_ms(run: &Run) -> Option<i64> {
    ///     Some(run.upstream()?.root_tick_ms())
    /// }
    /// ```
    pub fn root_tick_ms(&self) -> i64 {
        self.root_tick_ms
    }

    /// The upstream runs: one, or with `after_all` one per upstream in the
    /// order of the job's `after`.
    ///
    /// ```
    /// use cronlease::Run;
    ///
    /// fn all_ok(run: &Run) -> bool {
    ///     run.upstream().is_some_and(|u| u.runs().iter().all(|r| r.status() == "ok"))
    /// }
    /// ```
    pub fn runs(&self) -> &[UpstreamRun] {
        &self.runs
    }

    /// From the outcome fields a script answered (`root_tick`,
    /// `upstream_job`, `upstream_run_id`, `upstream_status`, the last three
    /// comma-separated lists of the same length); None when they do not
    /// read so.
    pub(crate) fn from_fields<'a>(
        fields: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Option<Upstream> {
        let (mut root, mut jobs, mut run_ids, mut statuses) = (None, None, None, None);
        for (name, value) in fields {
            match name {
                "root_tick" => root = value.parse::<i64>().ok(),
                "upstream_job" => jobs = Some(value),
                "upstream_run_id" => run_ids = Some(value),
                "upstream_status" => statuses = Some(value),
                _ => {}
            }
        }
        let (jobs, run_ids, statuses) = (
            jobs?.split(',').collect::<Vec<_>>(),
            run_ids?.split(',').collect::<Vec<_>>(),
            statuses?.split(',').collect::<Vec<_>>(),
        );
        if jobs.len() != run_ids.len() || jobs.len() != statuses.len() {
            return None;
        }
        let runs = jobs
            .iter()
            .zip(&run_ids)
            .zip(&statuses)
            .map(|((job, run_id), status)| {
                let valid = crate::config::is_name(job, 128) && crate::store::is_run_id(run_id);
                valid.then_some(())?;
                Some(UpstreamRun {
                    job: job.to_string(),
                    run_id: run_id.to_string(),
                    status: Status::parse(status)?,
                })
            })
            .collect::<Option<Vec<_>>>()?;
        Some(Upstream {
            root_tick_ms: root?,
            runs,
        })
    }

    /// One part of every upstream run, comma-separated in their order.
    fn list(&self, part: fn(&UpstreamRun) -> &str) -> String {
        self.runs.iter().map(part).collect::<Vec<_>>().join(",")
    }

    /// The outcome fields, as [`Upstream::from_fields`] reads them.
    fn each_stream_field(&self, field: &mut impl FnMut(&str, &dyn std::fmt::Display)) {
        let list = |part| self.list(part);
        field("root_tick", &self.root_tick_ms);
        field("upstream_job", &list(|r| &r.job));
        field("upstream_run_id", &list(|r| &r.run_id));
        field("upstream_status", &list(|r| r.status.as_str()));
    }

    /// The run's `CRONLEASE_UPSTREAM_*` and `CRONLEASE_ROOT_TICK*`
    /// variables (lists comma-separated, as in the outcome).
    pub(crate) fn env(&self) -> Vec<(String, String)> {
        let list = |part| self.list(part);
        let root = chrono::DateTime::from_timestamp_millis(self.root_tick_ms)
            .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
            .unwrap_or_default();
        vec![
            ("CRONLEASE_UPSTREAM_JOB".to_string(), list(|r| &r.job)),
            ("CRONLEASE_UPSTREAM_RUN_ID".to_string(), list(|r| &r.run_id)),
            (
                "CRONLEASE_UPSTREAM_STATUS".to_string(),
                list(|r| r.status.as_str()),
            ),
            ("CRONLEASE_ROOT_TICK".to_string(), root),
            (
                "CRONLEASE_ROOT_TICK_MS".to_string(),
                self.root_tick_ms.to_string(),
            ),
        ]
    }
}

impl UpstreamRun {
    /// The upstream job's name.
    ///
    /// ```
    /// use cronlease::Run;
    ///
    /// fn first_upstream(run: &Run) -> Option<&str> {
    ///     Some(run.upstream()?.runs().first()?.job())
    /// }
    /// ```
    pub fn job(&self) -> &str {
        &self.job
    }

    /// The upstream run's id (its outcome in `cronlease history`).
    ///
    /// ```
    /// use cronlease::Run;
    ///
    /// fn caused_by(run: &Run) -> Option<&str> {
    ///     Some(run.upstream()?.runs().first()?.run_id())
    /// }
    /// ```
    pub fn run_id(&self) -> &str {
        &self.run_id
    }

    /// How the upstream run ended: `ok`, `failed`, `timeout`,
    /// `lost_lease`, `interrupted` or `abandoned`.
    ///
    /// ```
    /// use cronlease::Run;
    ///
    /// fn upstream_failed(run: &Run) -> bool {
    ///     run.upstream().is_some_and(|u| u.runs().iter().any(|r| r.status() != "ok"))
    /// }
    /// ```
    pub fn status(&self) -> &str {
        self.status.as_str()
    }
}

/// Keeps the last `limit` bytes of what a run printed, cut at a character
/// boundary so the tail stays valid UTF-8.
#[derive(Debug, Clone)]
pub struct Tail {
    limit: usize,
    bytes: std::collections::VecDeque<u8>,
}

impl Tail {
    pub fn new(limit: usize) -> Tail {
        Tail {
            limit,
            bytes: std::collections::VecDeque::with_capacity(limit.min(64 * 1024)),
        }
    }

    /// Appends one line (without its newline).
    pub fn push_line(&mut self, line: &[u8]) {
        if self.limit == 0 {
            return;
        }
        // Only the last `limit` bytes of a long line can stay.
        let line = &line[line.len().saturating_sub(self.limit)..];
        self.bytes.extend(line);
        self.bytes.push_back(b'\n');
        if self.bytes.len() > self.limit {
            let excess = self.bytes.len() - self.limit;
            self.bytes.drain(..excess);
        }
    }

    /// The tail as text; a character cut by the limit is dropped and bytes
    /// that are not UTF-8 are replaced.
    pub fn text(&self) -> String {
        let (a, b) = self.bytes.as_slices();
        let mut all = Vec::with_capacity(a.len() + b.len());
        all.extend_from_slice(a);
        all.extend_from_slice(b);
        // Skip continuation bytes left at the front by the cut.
        let start = all
            .iter()
            .position(|&byte| (byte & 0b1100_0000) != 0b1000_0000)
            .unwrap_or(all.len());
        String::from_utf8_lossy(&all[start..]).into_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tail_keeps_the_last_bytes_on_a_character_boundary() {
        let check = |limit: usize, lines: &[&str], expected: &str| {
            let mut tail = Tail::new(limit);
            for line in lines {
                tail.push_line(line.as_bytes());
            }
            assert_eq!(tail.text(), expected, "limit {limit}, lines {lines:?}");
        };
        check(100, &["a", "b"], "a\nb\n");
        check(4, &["hello", "yo"], "\nyo\n");
        check(3, &["\u{e9}\u{e9}"], "\u{e9}\n");
        check(0, &["anything"], "");
    }

    #[test]
    fn the_duration_of_a_run_with_extreme_times_does_not_overflow() {
        // Found by the `spool` fuzz target: a spooled file may hold any
        // numbers.
        let json = r#"{"job":"draw","tick_ms":0,"fence":18446744073709551615,"run_id":"r","replica":"r","host":"h","started_ms":-9223372036854775808,"finished_ms":9223372036854775807,"status":"timeout","exit_code":null,"signal":9,"attempts":4294967295,"output":"","trigger":"manual","lease_key":""}"#;
        let outcome: Outcome = serde_json::from_str(json).unwrap();
        let fields = outcome.stream_fields();
        let duration = fields.iter().find(|(name, _)| name == "duration_ms");
        assert_eq!(duration.unwrap().1, i64::MAX.to_string());
        let backwards = Outcome {
            started_ms: i64::MAX,
            finished_ms: i64::MIN,
            ..outcome
        };
        let fields = backwards.stream_fields();
        let duration = fields.iter().find(|(name, _)| name == "duration_ms");
        assert_eq!(duration.unwrap().1, "0");
    }

    #[test]
    fn stream_fields_are_complete() {
        let outcome = Outcome {
            job: "draw".into(),
            tick_ms: 1_000,
            fence: 7,
            run_id: "r".into(),
            replica: "a".into(),
            host: "h".into(),
            started_ms: 1_010,
            finished_ms: 1_500,
            status: Status::Failed,
            exit_code: Some(3),
            signal: None,
            attempts: 2,
            output: "boom\n".into(),
            trigger: Trigger::Schedule,
            lease_key: "k".into(),
            cpu_ms: None,
            peak_memory_kb: None,
            oom_kills: None,
            upstream: None,
            params: [("region", "us"), ("Bad", "x"), ("note", "a\nb")]
                .map(|(n, v)| (n.to_string(), v.to_string()))
                .into(),
        };
        let fields = outcome.stream_fields();
        let names: Vec<&str> = fields.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            [
                "tick",
                "fence",
                "run_id",
                "replica",
                "host",
                "started_ms",
                "finished_ms",
                "duration_ms",
                "status",
                "exit_code",
                "attempts",
                "output",
                "trigger",
                "param.region"
            ]
        );
        assert!(fields.contains(&("duration_ms".into(), "490".into())));
    }
}
