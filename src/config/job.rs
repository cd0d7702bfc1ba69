//! `[jobs.<name>]`: one job's schedule (through [`Schedule`]), command,
//! environment, timeouts and policies, validated into [`Job`].

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;

use super::checker::Checker;
use super::daemon_section::MAX_GRACE;
use super::document::Source;
use super::run_env;
use super::{Command, Job, Leftovers, Limits, Misfire, OnHolderLost, Overlap};
use crate::schedule::{DstGap, DstPolicy, DstRepeat, Schedule, Timing, Zone};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawJob {
    schedule: Option<Spanned<String>>,
    timezone: Option<Spanned<String>>,
    command: Option<Spanned<Vec<String>>>,
    shell: Option<Spanned<String>>,
    workdir: Option<Spanned<String>>,
    #[serde(default)]
    env: BTreeMap<Spanned<String>, Spanned<String>>,
    inherit_env: Option<Spanned<Vec<Spanned<String>>>>,
    env_files: Option<Spanned<Vec<Spanned<String>>>>,
    #[serde(default)]
    env_credentials: BTreeMap<Spanned<String>, Spanned<String>>,
    timeout: Option<Spanned<String>>,
    overlap: Option<Overlap>,
    misfire: Option<Misfire>,
    misfire_grace: Option<Spanned<String>>,
    retries: Option<Spanned<i64>>,
    retry_backoff: Option<Spanned<String>>,
    on_holder_lost: Option<OnHolderLost>,
    leftovers: Option<Leftovers>,
    memory_max: Option<Spanned<String>>,
    cpu_max: Option<Spanned<String>>,
    tasks_max: Option<Spanned<i64>>,
    dst_gap: Option<Spanned<DstGap>>,
    dst_repeat: Option<Spanned<DstRepeat>>,
}

pub(super) const MAX_JOB_DURATION: Duration = Duration::from_secs(7 * 24 * 3600);

/// The job's `dst_gap` and `dst_repeat`, defaults where unset.
pub(super) fn dst_policy(raw: &RawJob) -> DstPolicy {
    DstPolicy {
        gap: raw
            .dst_gap
            .as_ref()
            .map(|v| *v.get_ref())
            .unwrap_or_default(),
        repeat: raw
            .dst_repeat
            .as_ref()
            .map(|v| *v.get_ref())
            .unwrap_or_default(),
    }
}

/// A DST policy is for fixed-time jobs: on a wall-clock job it would do
/// nothing, which is a mistake worth naming.
pub(super) fn check_dst_policy(
    checker: &mut Checker<'_>,
    section: &str,
    raw: &RawJob,
    schedule: Schedule,
) -> Option<Schedule> {
    if schedule.timing() == Timing::FixedTime {
        return Some(schedule);
    }
    let fields = [
        ("dst_gap", raw.dst_gap.as_ref().map(|v| v.span())),
        ("dst_repeat", raw.dst_repeat.as_ref().map(|v| v.span())),
    ];
    let mut valid = true;
    for (field, span) in fields {
        if let Some(span) = span {
            valid = false;
            checker.problem(
                Some(span),
                Some(section),
                Some(field),
                format!(
                    "`{field}` applies to fixed-time jobs, and {:?} runs by the wall clock (its minute or hour field starts with `*`): local times the clock skips do not run, repeated ones run again; remove `{field}`, or give the minute and hour as numbers, lists or ranges",
                    schedule.expression()
                ),
            );
        }
    }
    valid.then_some(schedule)
}

/// `[jobs.<name>]`: its schedule, command, working directory and
/// environment each by a step below, then its timing limits; the policies
/// (`overlap`, `misfire`, `on_holder_lost`) serde has checked already.
pub(super) fn validate_job(
    checker: &mut Checker<'_>,
    section: &str,
    name: &str,
    raw: RawJob,
    base_dir: &Path,
    source: Source,
    secrets: &[String],
) -> Option<Job> {
    let schedule = job_schedule(checker, section, name, &raw);
    let command = match source {
        Source::File => job_command(checker, section, raw.command, raw.shell),
        Source::Embedded => job_handler(checker, section, raw.command, raw.shell),
    };
    let workdir = job_workdir(checker, section, raw.workdir, base_dir);
    let env = job_env(checker, section, raw.env);
    let inherit_env = run_env::inherit_env(checker, section, raw.inherit_env, secrets);
    let env_files = run_env::env_files(checker, section, raw.env_files, base_dir);
    let env_credentials = run_env::env_credentials(checker, section, raw.env_credentials);
    let timeout = raw.timeout.as_ref().map(|t| {
        checker.duration(
            section,
            "timeout",
            Some(t),
            MAX_JOB_DURATION,
            MAX_JOB_DURATION,
        )
    });
    let misfire_grace = checker.duration(
        section,
        "misfire_grace",
        raw.misfire_grace.as_ref(),
        Duration::from_secs(300),
        MAX_JOB_DURATION,
    );
    let retry_backoff = checker.duration(
        section,
        "retry_backoff",
        raw.retry_backoff.as_ref(),
        Duration::from_secs(10),
        MAX_GRACE,
    );
    let retries = checker.integer(section, "retries", raw.retries.as_ref(), 0, 0..101);
    let limits = job_limits(
        checker,
        section,
        &raw.memory_max,
        &raw.cpu_max,
        &raw.tasks_max,
    );
    Some(Job {
        name: name.to_string(),
        schedule: schedule?,
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
    })
}

/// `timezone` (UTC when unset) and `schedule` read in it, with the job's
/// DST policy; the schedule is not checked when the zone is invalid.
fn job_schedule(
    checker: &mut Checker<'_>,
    section: &str,
    name: &str,
    raw: &RawJob,
) -> Option<Schedule> {
    let timezone = match &raw.timezone {
        None => Some(Zone::utc()),
        Some(tz) => match Zone::parse(tz.get_ref()) {
            Ok(tz) => Some(tz),
            Err(e) => {
                checker.problem(
                    Some(tz.span()),
                    Some(section),
                    Some("timezone"),
                    e.to_string(),
                );
                None
            }
        },
    };
    match (&raw.schedule, timezone) {
        (None, _) => {
            checker.problem(None, Some(section), Some("schedule"), "missing `schedule`: expected a cron expression such as \"0 12 * * *\" or \"@hourly\"".into());
            None
        }
        (Some(expr), Some(tz)) => {
            match checker.schedule(expr.get_ref(), tz, name, dst_policy(raw)) {
                Ok(schedule) => check_dst_policy(checker, section, raw, schedule),
                Err(e) => {
                    checker.problem(
                        Some(expr.span()),
                        Some(section),
                        Some("schedule"),
                        e.to_string(),
                    );
                    None
                }
            }
        }
        (Some(_), None) => None,
    }
}

/// Exactly one of `command` (an argv: a program, no NUL bytes) and `shell`
/// (a script, not blank, no NUL bytes).
fn job_command(
    checker: &mut Checker<'_>,
    section: &str,
    command: Option<Spanned<Vec<String>>>,
    shell: Option<Spanned<String>>,
) -> Option<Command> {
    match (command, shell) {
        (Some(_), Some(shell)) => {
            checker.problem(Some(shell.span()), Some(section), Some("shell"), "both `command` and `shell` are set: expected exactly one (`command` runs an argv directly, `shell` runs /bin/sh -c)".into());
            None
        }
        (None, None) => {
            checker.problem(None, Some(section), Some("command"), "neither `command` nor `shell` is set: expected `command = [\"program\", \"arg\"]` or `shell = \"script\"`".into());
            None
        }
        (Some(argv), None) => {
            let span = argv.span();
            let argv = argv.into_inner();
            if argv.first().is_none_or(|program| program.trim().is_empty()) {
                checker.problem(Some(span), Some(section), Some("command"), "empty command: expected a program and its arguments, e.g. [\"/usr/bin/backup\", \"--all\"]".into());
                None
            } else if argv.iter().any(|arg| arg.contains('\0')) {
                checker.problem(
                    Some(span),
                    Some(section),
                    Some("command"),
                    "an argument contains a NUL byte, which no program can receive".into(),
                );
                None
            } else {
                Some(Command::Argv(argv))
            }
        }
        (None, Some(script)) => {
            if script.get_ref().trim().is_empty() || script.get_ref().contains('\0') {
                checker.problem(Some(script.span()), Some(section), Some("shell"), "empty shell script (or one with a NUL byte): expected e.g. shell = \"pg_dump db | gzip > /backup/db.gz\"".into());
                None
            } else {
                Some(Command::Shell(script.into_inner()))
            }
        }
    }
}

/// An embedded job's work: its handler; a `command` or `shell` has no
/// place there.
fn job_handler(
    checker: &mut Checker<'_>,
    section: &str,
    command: Option<Spanned<Vec<String>>>,
    shell: Option<Spanned<String>>,
) -> Option<Command> {
    let span = command
        .map(|c| c.span())
        .or_else(|| shell.map(|s| s.span()));
    if span.is_none() {
        return Some(Command::Handler);
    }
    checker.problem(
        span,
        Some(section),
        Some("command"),
        "an embedded job runs its handler: `command` and `shell` have no place here".into(),
    );
    None
}

/// `workdir` resolved against `base_dir` (the config file's directory),
/// which is also the default.
fn job_workdir(
    checker: &mut Checker<'_>,
    section: &str,
    workdir: Option<Spanned<String>>,
    base_dir: &Path,
) -> PathBuf {
    match workdir {
        None => base_dir.to_path_buf(),
        Some(dir) if dir.get_ref().trim().is_empty() => {
            checker.problem(
                Some(dir.span()),
                Some(section),
                Some("workdir"),
                "empty path: expected a directory, absolute or relative to the config file".into(),
            );
            base_dir.to_path_buf()
        }
        Some(dir) => base_dir.join(dir.get_ref()),
    }
}

/// `env`: names a process can receive and that are not cronlease's own
/// ([`RESERVED_ENV_PREFIX`]), values without NUL bytes. Invalid entries
/// are left out.
fn job_env(
    checker: &mut Checker<'_>,
    section: &str,
    raw: BTreeMap<Spanned<String>, Spanned<String>>,
) -> BTreeMap<String, String> {
    let mut env = BTreeMap::new();
    for (key, value) in raw {
        let k = key.get_ref();
        if let Some(problem) = run_env::variable_problem(k) {
            checker.problem(Some(key.span()), Some(section), Some("env"), problem);
        } else if value.get_ref().contains('\0') {
            checker.problem(
                Some(value.span()),
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
    memory_max: &Option<Spanned<String>>,
    cpu_max: &Option<Spanned<String>>,
    tasks_max: &Option<Spanned<i64>>,
) -> Limits {
    let memory_max_bytes = memory_max.as_ref().and_then(|text| {
        let parsed = parse_bytes(text.get_ref()).filter(|&b| b >= 1024 * 1024);
        if parsed.is_none() {
            checker.problem(
                Some(text.span()),
                Some(section),
                Some("memory_max"),
                format!(
                    "invalid memory limit {:?}: expected at least 1M, as bytes or with K, M, G or T (\"512M\", \"2G\")",
                    text.get_ref()
                ),
            );
        }
        parsed
    });
    let cpu_max_percent = cpu_max.as_ref().and_then(|text| {
        let parsed = text
            .get_ref()
            .trim()
            .strip_suffix('%')
            .and_then(|n| n.trim().parse::<u32>().ok())
            .filter(|n| (1..=100_000).contains(n));
        if parsed.is_none() {
            checker.problem(
                Some(text.span()),
                Some(section),
                Some("cpu_max"),
                format!(
                    "invalid CPU limit {:?}: expected a percentage of one CPU from 1% up, such as \"50%\" or \"200%\" (two CPUs)",
                    text.get_ref()
                ),
            );
        }
        parsed
    });
    let tasks_max = tasks_max.as_ref().map(|given| {
        let n = checker.integer(section, "tasks_max", Some(given), 0, 1..4_194_305);
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
