//! `[jobs.<name>]`: one job's definition as given ([`JobSpec`]: read from
//! a job table, or built by an embedded job's
//! [`JobBuilder`](crate::JobBuilder)), and its one validator into [`Job`]:
//! schedule (through [`Schedule`]), command, environment, timeouts and
//! policies, with the job's name and what the deployment rules out.

use std::collections::BTreeMap;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use super::calendars::{Calendars, job_calendars};
use super::chain::{AfterOn, AfterParams, RawAfter, job_after};
use super::checker::{Checker, DurationValue, Given, Secrets, is_name};
use super::daemon_section::MAX_GRACE;
use super::groups::{GroupContext, Groups, job_group};
use super::http_job::{RawHttp, job_http};
use super::notify_rules::{NotifyContext, RawJobRules, job_rules};
use super::params::{RawParam, check_http_templates, job_params};
use super::run_env;
use super::timetable::{Expressions, Moment, RawTimetable, job_timetable};
use super::{
    ChannelSpec, Command, DaemonNotify, Job, Leftovers, Limits, Misfire, Mode, OnHolderLost,
    Overlap, Problem, RedisConfig, TokenSource, Topology,
};
use crate::calendar::{Calendar, JobCalendars};
use crate::schedule::{DstGap, DstRepeat, Timetable};

/// Where a job table comes from, which says what its jobs are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Source {
    /// A file on disk: at least one job, each running a `command` or a
    /// `shell` script.
    File,
    /// An embedded scheduler (`crate::embed`): any number of jobs (they may
    /// come later), each running a handler registered in the program.
    Embedded,
}

/// One job's definition as given, before it is validated: the settings of
/// a `[jobs.<name>]` table, each with its place in the document
/// ([`Given`]), or without one when an embedded job's builder set it.
/// Read from TOML with serde (`deny_unknown_fields`); [`validate_job`] is
/// its one validator, whichever way it came.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct JobSpec {
    pub(crate) schedule: Option<Given<Expressions>>,
    pub(crate) active_from: Option<Given<Moment>>,
    pub(crate) active_until: Option<Given<Moment>>,
    pub(crate) max_runs: Option<Given<i64>>,
    pub(crate) timezone: Option<Given<String>>,
    pub(crate) command: Option<Given<Vec<String>>>,
    pub(crate) shell: Option<Given<String>>,
    pub(crate) http: Option<Given<RawHttp>>,
    pub(crate) workdir: Option<Given<String>>,
    #[serde(default)]
    pub(crate) env: BTreeMap<Given<String>, Given<String>>,
    pub(crate) inherit_env: Option<Given<Vec<Given<String>>>>,
    pub(crate) env_files: Option<Given<Vec<Given<String>>>>,
    #[serde(default)]
    pub(crate) env_credentials: BTreeMap<Given<String>, Given<String>>,
    pub(crate) timeout: Option<Given<DurationValue>>,
    pub(crate) overlap: Option<Overlap>,
    pub(crate) misfire: Option<Misfire>,
    pub(crate) misfire_grace: Option<Given<DurationValue>>,
    pub(crate) retries: Option<Given<i64>>,
    pub(crate) retry_backoff: Option<Given<DurationValue>>,
    pub(crate) on_holder_lost: Option<OnHolderLost>,
    pub(crate) leftovers: Option<Leftovers>,
    pub(crate) memory_max: Option<Given<String>>,
    pub(crate) cpu_max: Option<Given<String>>,
    pub(crate) tasks_max: Option<Given<i64>>,
    pub(crate) dst_gap: Option<Given<DstGap>>,
    pub(crate) dst_repeat: Option<Given<DstRepeat>>,
    pub(crate) notify: Option<Given<Vec<Given<String>>>>,
    pub(crate) notify_on: Option<Given<Vec<Given<String>>>>,
    pub(crate) late_after: Option<Given<DurationValue>>,
    pub(crate) expect_success_within: Option<Given<DurationValue>>,
    pub(crate) repeat_every: Option<Given<DurationValue>>,
    pub(crate) after: Option<Given<Vec<Given<String>>>>,
    pub(crate) after_on: Option<Given<AfterOn>>,
    pub(crate) after_all: Option<Given<bool>>,
    pub(crate) after_params: Option<Given<AfterParams>>,
    #[serde(default)]
    pub(crate) params: BTreeMap<Given<String>, Given<RawParam>>,
    pub(crate) exclude: Option<Given<Vec<Given<String>>>>,
    pub(crate) only: Option<Given<Vec<Given<String>>>>,
    pub(crate) run_on: Option<Given<Vec<Given<String>>>>,
    pub(crate) mode: Option<Given<Mode>>,
    pub(crate) group: Option<Given<String>>,
    /// The calendars an embedded job was given (`JobBuilder::exclude`,
    /// `only`), which its `exclude` and `only` name; a table's jobs name
    /// the table's `[calendars.<name>]`.
    #[serde(skip)]
    pub(crate) calendars: Vec<Calendar>,
}

impl JobSpec {
    /// The notification settings, for [`job_rules`].
    fn notify_rules(&self) -> RawJobRules<'_> {
        RawJobRules {
            notify: self.notify.as_ref(),
            notify_on: self.notify_on.as_ref(),
            late_after: self.late_after.as_ref(),
            expect_success_within: self.expect_success_within.as_ref(),
            repeat_every: self.repeat_every.as_ref(),
        }
    }

    /// The timing settings, for [`job_timetable`].
    fn timetable(&self) -> RawTimetable<'_> {
        RawTimetable {
            schedule: self.schedule.as_ref(),
            timezone: self.timezone.as_ref(),
            dst_gap: self.dst_gap.as_ref(),
            dst_repeat: self.dst_repeat.as_ref(),
            active_from: self.active_from.as_ref(),
            active_until: self.active_until.as_ref(),
            max_runs: self.max_runs.as_ref(),
        }
    }

    /// The chain settings, for [`job_after`].
    fn chain(&self) -> RawAfter<'_> {
        RawAfter {
            after: self.after.as_ref(),
            after_on: self.after_on.as_ref(),
            after_all: self.after_all.as_ref(),
            after_params: self.after_params.as_ref(),
        }
    }
}

/// What every job of a table is validated against besides its own
/// definition: the deployment, where relative paths start, where the
/// table comes from, and the replica's secrets.
#[derive(Debug, Clone)]
pub(crate) struct JobContext {
    /// `[redis] quorum`: no job may ask for `on_holder_lost = "rerun"`.
    quorum: bool,
    /// The config file's directory: relative paths start there.
    base_dir: PathBuf,
    source: Source,
    /// The replica's secret variables, which no `inherit_env` may list.
    secrets: Vec<String>,
    /// The channels defined and `[daemon]`'s notification defaults.
    notify: NotifyContext,
    /// The table's calendars, which `exclude` and `only` name.
    calendars: Calendars,
    /// The table's concurrency groups, which `group` names, and whether
    /// the deployment can hold them.
    groups: GroupContext,
}

impl JobContext {
    /// The context of the jobs of the table at `path` from `source`, under
    /// its `[redis]` section (`None` when it is not valid) and its
    /// dashboard token, if any.
    pub(crate) fn new(
        redis: Option<&RedisConfig>,
        dashboard_token: Option<&TokenSource>,
        path: &Path,
        source: Source,
    ) -> JobContext {
        JobContext {
            quorum: matches!(redis.map(|r| &r.topology), Some(Topology::Quorum(_))),
            base_dir: super::environment::config_dir(path),
            source,
            secrets: super::secret_env_names(
                redis.and_then(|r| r.password_env.as_deref()),
                dashboard_token,
            ),
            notify: NotifyContext::default(),
            calendars: Calendars::default(),
            groups: GroupContext {
                groups: Groups::default(),
                refused: match redis.map(|r| &r.topology) {
                    Some(Topology::Quorum(_)) => Some("quorum"),
                    Some(Topology::Cluster(_)) => Some("cluster"),
                    _ => None,
                },
            },
        }
    }

    /// The context with the table's concurrency groups.
    pub(crate) fn with_groups(mut self, groups: Groups) -> JobContext {
        self.groups.groups = groups;
        self
    }

    /// The context with the table's calendars.
    pub(crate) fn with_calendars(mut self, calendars: Calendars) -> JobContext {
        self.calendars = calendars;
        self
    }

    /// The context with the channels `declared` (sorted; those of
    /// `channels` are valid, and their secret variables no `inherit_env`
    /// may list either) and `[daemon]`'s notification defaults.
    pub(crate) fn with_notify(
        mut self,
        channels: &BTreeMap<String, ChannelSpec>,
        declared: Vec<String>,
        defaults: DaemonNotify,
    ) -> JobContext {
        let secrets = channels.values().filter_map(ChannelSpec::secret_env);
        self.secrets.extend(secrets.map(str::to_string));
        self.notify = NotifyContext {
            channels: declared,
            defaults,
        };
        self
    }
}

/// Validates jobs given by code, each on its own, as their `[jobs.<name>]`
/// tables would be: the valid ones in the order given, and every problem
/// of the others (each naming its job and field, with no place). Jobs
/// that share a schedule share its parse.
pub(crate) fn validate_specs<'a>(
    jobs: impl IntoIterator<Item = (&'a str, &'a JobSpec)>,
    context: &JobContext,
) -> (Vec<Job>, Vec<Problem>) {
    let mut checker = Checker::new("", Secrets::Read);
    let mut valid = Vec::new();
    for (name, spec) in jobs {
        let before = checker.problems.len();
        let job = validate_named_job(&mut checker, name, None, Some(spec.clone()), context);
        if let Some(job) = job
            && checker.problems.len() == before
        {
            valid.push(job);
        }
    }
    (valid, checker.problems)
}

/// One job: its name checked (`name_at` its place in the document, if
/// any), its definition validated (`None` when it did not deserialize:
/// its problems are recorded), and what the deployment rules out
/// (`on_holder_lost = "rerun"` with a quorum). `None` when not valid.
pub(super) fn validate_named_job(
    checker: &mut Checker<'_>,
    name: &str,
    name_at: Option<Range<usize>>,
    spec: Option<JobSpec>,
    context: &JobContext,
) -> Option<Job> {
    let section = format!("jobs.{name}");
    if !is_name(name, 128) {
        checker.problem(
            name_at.clone(),
            Some(&section),
            None,
            format!(
                "invalid job name {name:?}: expected 1 to 128 characters from A-Z a-z 0-9 _ . -"
            ),
        );
    }
    let spec = spec?;
    let mode_at = spec.mode.as_ref().and_then(Given::at);
    let job = validate_job(checker, &section, name, spec, context)?;
    if job.mode == Mode::EveryReplica {
        broadcast_combinations(checker, &section, mode_at, &job, context);
    }
    if context.quorum && job.on_holder_lost == OnHolderLost::Rerun {
        checker.problem(
            name_at,
            Some(&section),
            Some("on_holder_lost"),
            "on_holder_lost = \"rerun\" is not available with `[redis] quorum` (a rerun would need its own quorum claim): expected \"record\"".into(),
        );
    }
    if context.quorum && !job.notify.channels.is_empty() {
        checker.problem(
            None,
            Some(&section),
            Some("notify"),
            "notifications are not available with `[redis] quorum` (each master would hold its own copy of every event): expected no notify channels".into(),
        );
    }
    if context.quorum && job.after.is_some() {
        checker.problem(
            None,
            Some(&section),
            Some("after"),
            "chains are not available with `[redis] quorum` (a follower's run would need its own quorum claim): expected no `after`".into(),
        );
    }
    if context.quorum && job.max_runs.is_some() {
        checker.problem(
            None,
            Some(&section),
            Some("max_runs"),
            "max_runs is not available with `[redis] quorum` (each master would keep its own count, and a claim undone on a minority would leave it counted there): expected no `max_runs`".into(),
        );
    }
    Some(job)
}

/// What a broadcast job (`mode = "every_replica"`) cannot be: a
/// follower (a chain's run is one run in the cluster), rerun elsewhere
/// (`on_holder_lost = "rerun"`), under a quorum
/// (each replica's mark would need a quorum claim of its own), limited by
/// `max_runs` (counted per tick in the cluster), in a concurrency group
/// (whose slots are the cluster's), nor `overlap =
/// "replace"` (each replica's run holds its own lease; none replaces
/// another's). Each refusal names the setting at the place of `mode`.
fn broadcast_combinations(
    checker: &mut Checker<'_>,
    section: &str,
    mode_at: Option<Range<usize>>,
    job: &Job,
    context: &JobContext,
) {
    let mut refuse = |field: &str, why: &str| {
        checker.problem(
            mode_at.clone(),
            Some(section),
            Some("mode"),
            format!("mode = \"every_replica\" cannot go with {field}: {why}; expected mode = \"one\" or no {field}"),
        );
    };
    if job.after.is_some() {
        refuse(
            "`after`",
            "a follower's run is one run in the cluster, started by its upstream's outcome",
        );
    }
    if context.quorum {
        refuse(
            "`[redis] quorum`",
            "each replica's high-water mark would need a quorum claim of its own",
        );
    }
    if job.max_runs.is_some() {
        refuse(
            "`max_runs`",
            "max_runs counts the ticks that start a run in the cluster, and a broadcast tick starts one per replica",
        );
    }
    if job.group.is_some() {
        refuse(
            "`group`",
            "a broadcast run is each replica's own and takes no slot of a group shared across the cluster",
        );
    }
    if job.on_holder_lost == OnHolderLost::Rerun {
        refuse(
            "`on_holder_lost = \"rerun\"`",
            "a rerun is claimed by whichever replica sweeps, and a broadcast run belongs to its own replica",
        );
    }
    if job.overlap == Overlap::Replace {
        refuse(
            "`overlap = \"replace\"`",
            "each replica's run holds a lease of its own, which no other run replaces",
        );
    }
}

pub(super) const MAX_JOB_DURATION: Duration = Duration::from_secs(7 * 24 * 3600);

/// `[jobs.<name>]`: its schedule, command, working directory and
/// environment each by a step below, then its timing limits; the policies
/// (`overlap`, `misfire`, `on_holder_lost`) are typed already.
fn validate_job(
    checker: &mut Checker<'_>,
    section: &str,
    name: &str,
    mut raw: JobSpec,
    context: &JobContext,
) -> Option<Job> {
    let (base_dir, secrets) = (context.base_dir.as_path(), context.secrets.as_slice());
    let after = job_after(checker, section, name, raw.chain());
    let (schedule, max_runs) =
        job_timetable(checker, section, name, &raw.timetable(), after.as_ref());
    let calendars = calendar_settings(checker, section, &raw, context, schedule.as_ref());
    let command = job_work(checker, section, &mut raw, context);
    // Read before the fields below are taken out of `raw`.
    let (timeout, misfire_grace, retry_backoff) = job_durations(checker, section, &raw);
    let rules = raw.notify_rules();
    let notify = job_rules(checker, section, rules, &context.notify);
    let workdir = job_workdir(checker, section, raw.workdir, base_dir);
    let env = job_env(checker, section, raw.env);
    let inherit_env = run_env::inherit_env(checker, section, raw.inherit_env, secrets);
    let env_files = run_env::env_files(checker, section, raw.env_files, base_dir);
    let env_credentials = run_env::env_credentials(checker, section, raw.env_credentials);
    let retries = checker.given_integer(section, "retries", raw.retries.as_ref(), 0, 0..101);
    let limits = job_limits(
        checker,
        section,
        &raw.memory_max,
        &raw.cpu_max,
        &raw.tasks_max,
    );
    let params = job_params(checker, section, std::mem::take(&mut raw.params));
    let run_on = super::placement::tag_list(checker, section, "run_on", raw.run_on.take());
    let mode = raw.mode.as_ref().map_or(Mode::One, |m| *m.get());
    let group = job_group(checker, section, raw.group.as_ref(), &context.groups);
    if let Some(Command::Http(request)) = &command {
        check_http_templates(checker, section, request, &params);
    }
    Some(Job {
        name: name.to_string(),
        schedule: schedule?,
        max_runs,
        after,
        followers: Vec::new(),
        command: command?,
        workdir,
        env,
        inherit_env,
        env_files,
        env_credentials,
        timeout,
        overlap: raw.overlap.unwrap_or(Overlap::Skip),
        misfire: raw.misfire.unwrap_or(Misfire::RunOnce),
        misfire_grace,
        retries: u32::try_from(retries).expect("retries was checked to be within 0..=100"),
        retry_backoff,
        on_holder_lost: raw.on_holder_lost.unwrap_or(OnHolderLost::Record),
        leftovers: raw.leftovers.unwrap_or_default(),
        limits,
        notify,
        params,
        calendars,
        run_on,
        mode,
        group,
    })
}

/// `timeout` (none when unset), `misfire_grace` and `retry_backoff`.
fn job_durations(
    checker: &mut Checker<'_>,
    section: &str,
    raw: &JobSpec,
) -> (Option<Duration>, Duration, Duration) {
    let timeout = raw.timeout.as_ref().map(|t| {
        checker.duration_value(
            section,
            "timeout",
            Some(t),
            MAX_JOB_DURATION,
            MAX_JOB_DURATION,
        )
    });
    let misfire_grace = checker.duration_value(
        section,
        "misfire_grace",
        raw.misfire_grace.as_ref(),
        Duration::from_secs(300),
        MAX_JOB_DURATION,
    );
    let retry_backoff = checker.duration_value(
        section,
        "retry_backoff",
        raw.retry_backoff.as_ref(),
        Duration::from_secs(10),
        MAX_GRACE,
    );
    (timeout, misfire_grace, retry_backoff)
}

/// `exclude` and `only`: the table's calendars, or those given by code.
fn calendar_settings(
    checker: &mut Checker<'_>,
    section: &str,
    raw: &JobSpec,
    context: &JobContext,
    schedule: Option<&Option<Timetable>>,
) -> JobCalendars {
    let fields = [
        ("exclude", raw.exclude.as_ref()),
        ("only", raw.only.as_ref()),
    ];
    let calendars = (&context.calendars, raw.calendars.as_slice());
    job_calendars(checker, section, fields, calendars, schedule)
}

/// What the job does, taken out of `raw`: a command, a script or a
/// request from a file, a handler when embedded.
fn job_work(
    checker: &mut Checker<'_>,
    section: &str,
    raw: &mut JobSpec,
    context: &JobContext,
) -> Option<Command> {
    let (command, shell, http) = (raw.command.take(), raw.shell.take(), raw.http.take());
    match context.source {
        Source::File => {
            let work = Work {
                command,
                shell,
                http,
            };
            job_command(checker, section, work, &context.base_dir)
        }
        Source::Embedded => job_handler(checker, section, command, shell, http),
    }
}

/// What a job in a file does, as given: `command`, `shell` or `http`.
struct Work {
    command: Option<Given<Vec<String>>>,
    shell: Option<Given<String>>,
    http: Option<Given<RawHttp>>,
}

/// Exactly one of `command` (an argv: a program, no NUL bytes), `shell`
/// (a script, not blank, no NUL bytes) and `http` (a request).
fn job_command(
    checker: &mut Checker<'_>,
    section: &str,
    work: Work,
    base_dir: &Path,
) -> Option<Command> {
    let Work {
        command,
        shell,
        http,
    } = work;
    let given = [
        command.as_ref().map(|c| ("command", c.at())),
        shell.as_ref().map(|s| ("shell", s.at())),
        http.as_ref().map(|h| ("http", h.at())),
    ];
    let given: Vec<_> = given.into_iter().flatten().collect();
    if let [_, (field, at), ..] = &given[..] {
        let names: Vec<_> = given.iter().map(|(name, _)| format!("`{name}`")).collect();
        let quantifier = if given.len() == 2 { "both" } else { "all of" };
        checker.problem(at.clone(), Some(section), Some(field), format!("{quantifier} {} are set: expected exactly one (`command` runs an argv directly, `shell` runs /bin/sh -c, `http` sends a request)", names.join(" and ")));
        return None;
    }
    match (command, shell, http) {
        (None, None, None) => {
            checker.problem(None, Some(section), Some("command"), "neither `command` nor `shell` nor `http` is set: expected `command = [\"program\", \"arg\"]`, `shell = \"script\"` or `http = { url = \"https://…\" }`".into());
            None
        }
        (Some(argv), _, _) => {
            let span = argv.at();
            let argv = argv.into_inner();
            if argv.first().is_none_or(|program| program.trim().is_empty()) {
                checker.problem(span, Some(section), Some("command"), "empty command: expected a program and its arguments, e.g. [\"/usr/bin/backup\", \"--all\"]".into());
                None
            } else if argv.iter().any(|arg| arg.contains('\0')) {
                checker.problem(
                    span,
                    Some(section),
                    Some("command"),
                    "an argument contains a NUL byte, which no program can receive".into(),
                );
                None
            } else {
                Some(Command::Argv(argv))
            }
        }
        (None, Some(script), _) => {
            if script.get().trim().is_empty() || script.get().contains('\0') {
                checker.problem(script.at(), Some(section), Some("shell"), "empty shell script (or one with a NUL byte): expected e.g. shell = \"pg_dump db | gzip > /backup/db.gz\"".into());
                None
            } else {
                Some(Command::Shell(script.into_inner()))
            }
        }
        (None, None, Some(http)) => job_http(checker, section, http.into_inner(), base_dir)
            .map(|request| Command::Http(Box::new(request))),
    }
}

/// An embedded job's work: its handler; a `command`, `shell` or `http` has no
/// place there.
fn job_handler(
    checker: &mut Checker<'_>,
    section: &str,
    command: Option<Given<Vec<String>>>,
    shell: Option<Given<String>>,
    http: Option<Given<RawHttp>>,
) -> Option<Command> {
    if command.is_none() && shell.is_none() && http.is_none() {
        return Some(Command::Handler);
    }
    let at = command
        .map(|c| c.at())
        .or_else(|| shell.map(|s| s.at()))
        .or_else(|| http.map(|h| h.at()));
    checker.problem(
        at.flatten(),
        Some(section),
        Some("command"),
        "an embedded job runs its handler: `command`, `shell` and `http` have no place here".into(),
    );
    None
}

/// `workdir` resolved against `base_dir` (the config file's directory),
/// which is also the default.
fn job_workdir(
    checker: &mut Checker<'_>,
    section: &str,
    workdir: Option<Given<String>>,
    base_dir: &Path,
) -> PathBuf {
    match workdir {
        None => base_dir.to_path_buf(),
        Some(dir) if dir.get().trim().is_empty() => {
            checker.problem(
                dir.at(),
                Some(section),
                Some("workdir"),
                "empty path: expected a directory, absolute or relative to the config file".into(),
            );
            base_dir.to_path_buf()
        }
        Some(dir) => base_dir.join(dir.get()),
    }
}

/// `env`: names a process can receive and that are not cronlease's own
/// ([`RESERVED_ENV_PREFIX`]), values without NUL bytes. Invalid entries
/// are left out.
fn job_env(
    checker: &mut Checker<'_>,
    section: &str,
    raw: BTreeMap<Given<String>, Given<String>>,
) -> BTreeMap<String, String> {
    let mut env = BTreeMap::new();
    for (key, value) in raw {
        let k = key.get();
        if let Some(problem) = run_env::variable_problem(k) {
            checker.problem(key.at(), Some(section), Some("env"), problem);
        } else if value.get().contains('\0') {
            checker.problem(
                value.at(),
                Some(section),
                Some("env"),
                format!("the value of {k} contains a NUL byte"),
            );
        } else {
            env.insert(key.into_inner(), value.into_inner());
        }
    }
    env
}

/// `memory_max` ("512M", "2G", a number of bytes), `cpu_max` ("50%",
/// "150%": of one CPU) and `tasks_max` (processes and threads), each
/// optional.
fn job_limits(
    checker: &mut Checker<'_>,
    section: &str,
    memory_max: &Option<Given<String>>,
    cpu_max: &Option<Given<String>>,
    tasks_max: &Option<Given<i64>>,
) -> Limits {
    let memory_max_bytes = memory_max.as_ref().and_then(|text| {
        let parsed = parse_bytes(text.get()).filter(|&b| b >= 1024 * 1024);
        if parsed.is_none() {
            checker.problem(
                text.at(),
                Some(section),
                Some("memory_max"),
                format!(
                    "invalid memory limit {:?}: expected at least 1M, as bytes or with K, M, G or T (\"512M\", \"2G\")",
                    text.get()
                ),
            );
        }
        parsed
    });
    let cpu_max_percent = cpu_max.as_ref().and_then(|text| {
        let parsed = text
            .get()
            .trim()
            .strip_suffix('%')
            .and_then(|n| n.trim().parse::<u32>().ok())
            .filter(|n| (1..=100_000).contains(n));
        if parsed.is_none() {
            checker.problem(
                text.at(),
                Some(section),
                Some("cpu_max"),
                format!(
                    "invalid CPU limit {:?}: expected a percentage of one CPU from 1% up, such as \"50%\" or \"200%\" (two CPUs)",
                    text.get()
                ),
            );
        }
        parsed
    });
    let tasks_max = tasks_max.as_ref().map(|given| {
        let n = checker.given_integer(section, "tasks_max", Some(given), 0, 1..4_194_305);
        u32::try_from(n).unwrap_or(u32::MAX)
    });
    Limits {
        memory_max_bytes,
        cpu_max_percent,
        tasks_max,
    }
}

/// "512M" → 536870912; plain digits are bytes.
fn parse_bytes(text: &str) -> Option<u64> {
    let text = text.trim();
    let (digits, unit) = match text.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => text.split_at(i),
        None => (text, ""),
    };
    let shift = match unit.trim() {
        "" | "B" => 0,
        "K" | "KB" | "KiB" => 10,
        "M" | "MB" | "MiB" => 20,
        "G" | "GB" | "GiB" => 30,
        "T" | "TB" | "TiB" => 40,
        _ => return None,
    };
    digits.parse::<u64>().ok()?.checked_mul(1u64 << shift)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::config::Config;

    /// (section, field, message) of each problem, in one order.
    fn places(problems: &[Problem]) -> Vec<(Option<String>, Option<String>, String)> {
        let mut places: Vec<_> = problems
            .iter()
            .map(|p| (p.section.clone(), p.field.clone(), p.message.clone()))
            .collect();
        places.sort();
        places
    }

    #[test]
    fn a_job_given_by_code_has_the_problems_of_its_table() {
        let path = Path::new("/etc/cronlease/jobs.toml");
        let text = "[redis]\nurl = \"redis://127.0.0.1:6379/0\"\n\
            [jobs.\"bad name\"]\nschedule = \"0 12 * * *\"\ntimeout = \"0ms\"\n\
            misfire_grace = \"691200000ms\"\nretries = 101\nretry_backoff = \"7200000ms\"\n\
            [jobs.wall]\nschedule = \"*/5 * * * *\"\ndst_gap = \"skip\"\ndst_repeat = \"both\"\n\
            [jobs.typo]\nschedule = \"0 12 * * *\"\ntimezone = \"Europe/Berlim\"\n\
            [jobs.february]\nschedule = \"0 12 31 2 *\"\n";
        let from_table = Config::parse_with(text, path, Source::Embedded)
            .expect_err("every job has a problem")
            .problems;

        let code = |value: &str| Some(Given::code(value.to_string()));
        let exact = |d: Duration| Some(Given::code(DurationValue::Exact(d)));
        let bad_name = JobSpec {
            schedule: Some(Given::code(Expressions(vec!["0 12 * * *".into()]))),
            timeout: exact(Duration::from_micros(900)),
            misfire_grace: exact(Duration::from_secs(8 * 24 * 3600)),
            retries: Some(Given::code(101)),
            retry_backoff: exact(Duration::from_secs(7200)),
            ..JobSpec::default()
        };
        let wall = JobSpec {
            schedule: Some(Given::code(Expressions(vec!["*/5 * * * *".into()]))),
            dst_gap: Some(Given::code(DstGap::Skip)),
            dst_repeat: Some(Given::code(DstRepeat::Both)),
            ..JobSpec::default()
        };
        let typo = JobSpec {
            schedule: Some(Given::code(Expressions(vec!["0 12 * * *".into()]))),
            timezone: code("Europe/Berlim"),
            ..JobSpec::default()
        };
        let february = JobSpec {
            schedule: Some(Given::code(Expressions(vec!["0 12 31 2 *".into()]))),
            ..JobSpec::default()
        };
        let context = JobContext::new(None, None, path, Source::Embedded);
        let jobs = [
            ("bad name", &bad_name),
            ("wall", &wall),
            ("typo", &typo),
            ("february", &february),
        ];
        let (valid, from_code) = validate_specs(jobs, &context);

        assert!(valid.is_empty(), "{valid:?}");
        assert_eq!(from_table.len(), 9, "{from_table:#?}");
        assert_eq!(places(&from_code), places(&from_table));
        assert!(from_code.iter().all(|p| p.line_col.is_none()));
        assert!(from_table.iter().all(|p| p.line_col.is_some()));
    }
}
