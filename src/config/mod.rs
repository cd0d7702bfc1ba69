//! The job table: the TOML file every replica loads, read in two stages.
//!
//! Stage one mirrors the file: `Raw*` structs deserialized by serde with
//! `deny_unknown_fields`, every value still as written (strings for
//! durations, cron expressions and zones) and wrapped in [`Spanned`] so a
//! problem found later can still name its line and column. Stage two,
//! [`Config::parse`], validates those into [`Config`]: parsed schedules,
//! [`Duration`]s, a [`Zone`], checked names. Nothing stringly typed leaves this
//! module.
//!
//! The loader reports **every** problem it finds, not the first: the TOML
//! syntax errors of the whole file; then each section and each job is
//! deserialized on its own, and a key that fails (an unknown key, a value of
//! the wrong type) is recorded and dropped so the rest of that table is still
//! checked; then the semantic checks run on whatever deserialized. A config
//! with any problem is rejected whole: there is no half-applied table.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::io::Read;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use toml::Spanned;
use toml::de::{DeTable, DeValue, ValueDeserializer};

mod duplicates;

use crate::schedule::{DstGap, DstPolicy, DstRepeat, Schedule, ScheduleError, Timing, Zone};

/// Files larger than this are refused before parsing: a job table is a few
/// kilobytes, and a huge file is a mistake (or `/dev/zero`).
pub const MAX_CONFIG_BYTES: u64 = 1024 * 1024;

/// The Redis key prefix when the config names none.
pub const DEFAULT_KEY_PREFIX: &str = "cronlease";

/// Where the daemon spools outcomes when the config names no `state_dir`.
pub const DEFAULT_STATE_DIR: &str = "/var/lib/cronlease";

/// Environment variables cronlease sets for every run; a job may not set them.
pub const RESERVED_ENV_PREFIX: &str = "CRONLEASE_";

/// The validated configuration: what every other module reads.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// The file this was loaded from, for messages and reloads.
    pub source: PathBuf,
    pub redis: RedisConfig,
    pub daemon: DaemonConfig,
    /// The jobs by name. A `BTreeMap` so every listing is in one stable order.
    pub jobs: BTreeMap<String, Job>,
}

/// How to reach Redis and where our keys live in it.
#[derive(Clone, PartialEq)]
pub struct RedisConfig {
    /// Which servers, and how they share the data.
    pub topology: Topology,
    /// First part of every key, so several clusters can share one Redis.
    pub key_prefix: String,
    /// How long to wait for a connection before counting Redis as away.
    pub connect_timeout: Duration,
    /// How long one command may take before its reply counts as lost. A lost
    /// claim reply is resolved by reading back, never by guessing.
    pub command_timeout: Duration,
    /// The ACL user (overrides a user in the URLs).
    pub username: Option<String>,
    /// From `password_env` or `password_file` (overrides one in the URLs).
    pub password: Option<Secret>,
    pub tls: Tls,
    /// After each claim, `WAIT min_replicas_ack ack_timeout` on the same
    /// connection; a claim fewer replicas acknowledged is not run. 0: off.
    pub min_replicas_ack: u32,
    pub ack_timeout: Duration,
}

/// The Redis deployment cronlease talks to. Every URL may hold a password:
/// print them only through [`Topology::describe`].
#[derive(Clone, PartialEq)]
pub enum Topology {
    /// One server (or one endpoint in front of several).
    Single(String),
    /// The master Sentinel names `master_name`, followed across failovers.
    Sentinel {
        sentinels: Vec<String>,
        master_name: String,
    },
    /// A Redis Cluster, discovered from these seed nodes.
    Cluster(Vec<String>),
    /// Independent masters (at least 3): a claim holds only with a
    /// majority of them.
    Quorum(Vec<String>),
}

impl Topology {
    /// One line for logs, errors and `status`, with passwords redacted.
    pub fn describe(&self) -> String {
        let list = |urls: &[String]| {
            urls.iter()
                .map(|u| redact_url(u))
                .collect::<Vec<_>>()
                .join(", ")
        };
        match self {
            Topology::Single(url) => redact_url(url),
            Topology::Sentinel {
                sentinels,
                master_name,
            } => format!("master {master_name:?} via sentinels {}", list(sentinels)),
            Topology::Cluster(nodes) => format!("cluster {}", list(nodes)),
            Topology::Quorum(nodes) => format!("quorum of {}", list(nodes)),
        }
    }
}

/// TLS settings for `rediss://` URLs.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Tls {
    /// PEM file of the CA(s) to trust instead of the system's roots.
    pub ca_file: Option<PathBuf>,
    /// PEM files of a client certificate and its key (mutual TLS).
    pub cert_file: Option<PathBuf>,
    pub key_file: Option<PathBuf>,
    /// Accept any server certificate. Logged loudly at every start.
    pub insecure_skip_verify: bool,
}

/// A password: printed as `***` by `Debug` and `Display`.
#[derive(Clone, PartialEq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: String) -> Secret {
        Secret(value)
    }

    /// The password itself, for the connection handshake only.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

impl fmt::Debug for RedisConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisConfig")
            .field("topology", &self.topology.describe())
            .field("key_prefix", &self.key_prefix)
            .field("connect_timeout", &self.connect_timeout)
            .field("command_timeout", &self.command_timeout)
            .field("username", &self.username)
            .field("password", &self.password)
            .field("tls", &self.tls)
            .field("min_replicas_ack", &self.min_replicas_ack)
            .field("ack_timeout", &self.ack_timeout)
            .finish()
    }
}

impl RedisConfig {
    /// One server at `url` with the default settings (operator commands'
    /// `--redis-url`).
    pub fn single(url: String, key_prefix: String) -> RedisConfig {
        RedisConfig {
            topology: Topology::Single(url),
            key_prefix,
            connect_timeout: Duration::from_secs(5),
            command_timeout: Duration::from_secs(5),
            username: None,
            password: None,
            tls: Tls::default(),
            min_replicas_ack: 0,
            ack_timeout: DEFAULT_ACK_TIMEOUT,
        }
    }

    /// Where Redis is, with passwords redacted, for logs and errors.
    pub fn describe(&self) -> String {
        self.topology.describe()
    }
}

/// How long a claim waits for replicas to acknowledge it by default.
pub const DEFAULT_ACK_TIMEOUT: Duration = Duration::from_millis(500);

/// Settings of the replica process itself.
#[derive(Debug, Clone, PartialEq)]
pub struct DaemonConfig {
    /// How long a claim stays valid without renewal. The watchdog renews every
    /// `lease / 3`; a replica that cannot renew stops its run before the
    /// lease could have passed to someone else.
    pub lease: Duration,
    /// On SIGTERM, how long runs in flight may go on before they are
    /// interrupted.
    pub shutdown_grace: Duration,
    /// Between SIGTERM and SIGKILL when a run is stopped (timeout, lost lease,
    /// shutdown).
    pub kill_grace: Duration,
    /// This replica's name in Redis; `None` means `<hostname>-<pid>-<hex>`.
    pub replica_id: Option<String>,
    /// Where outcomes that could not reach Redis are spooled. Default:
    /// `$STATE_DIRECTORY` (set by systemd's `StateDirectory=`), else
    /// `/var/lib/cronlease`.
    pub state_dir: PathBuf,
    /// Approximate number of outcomes kept per job (`XADD MAXLEN ~`).
    pub history: u32,
    /// Bytes of a run's output kept in its outcome record (the tail).
    pub output_tail_bytes: usize,
    /// How often the replica writes its heartbeat.
    pub heartbeat: Duration,
    pub log_format: LogFormat,
    /// Where `/metrics` and `/healthz` are served; `None` turns them off.
    pub metrics_listen: Option<std::net::SocketAddr>,
}

/// Where metrics are served unless the config says otherwise.
pub const DEFAULT_METRICS_LISTEN: &str = "127.0.0.1:9464";

/// How the daemon writes its log (to stderr).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LogFormat {
    /// Human-readable lines; under journald (`JOURNAL_STREAM` set) without
    /// timestamps and with `<N>` syslog priority prefixes.
    Text,
    /// One JSON object per line, for log shippers.
    Json,
}

/// One job of the table, validated.
#[derive(Debug, Clone, PartialEq)]
pub struct Job {
    /// Also a Redis key part: `[A-Za-z0-9_.-]`, 1 to 128 characters.
    pub name: String,
    pub schedule: Schedule,
    pub command: Command,
    /// Absolute; relative paths in the file are resolved against the file's
    /// directory.
    pub workdir: PathBuf,
    pub env: BTreeMap<String, String>,
    /// `None`: the run may take as long as it takes.
    pub timeout: Option<Duration>,
    pub overlap: Overlap,
    pub misfire: Misfire,
    /// How old a missed tick may be and still run after an outage.
    pub misfire_grace: Duration,
    /// Extra attempts after a failed one, under the same claim and fence.
    pub retries: u32,
    pub retry_backoff: Duration,
    pub on_holder_lost: OnHolderLost,
}

impl Job {
    /// A hash of the whole definition (FNV-1a of its debug form, so the same
    /// binary on every host computes the same value). Replicas publish it in
    /// their heartbeat; `cronlease status` names those that differ (drift).
    pub fn definition_hash(&self) -> String {
        let text = format!("{self:?}");
        let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
        for byte in text.bytes() {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
        format!("{hash:016x}")
    }
}

/// What a run executes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// Executed directly, no shell: `argv[0]` is looked up in `PATH`.
    Argv(Vec<String>),
    /// The explicit opt-in for a shell: `/bin/sh -c <script>`.
    Shell(String),
    /// `benchmark_noop = true`: runs nothing and succeeds at once, in
    /// process. Exists only so `cronlease`'s benchmark can measure the
    /// coordination without thousands of processes a second.
    BenchmarkNoop,
}

/// What to do when a tick comes while a run of the same job is in flight.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Overlap {
    /// Do not start; record `skipped_overlap` for the tick.
    Skip,
    /// Start anyway; each run has its own lease.
    Allow,
    /// Start the new run; the old one loses its lease and is stopped.
    Replace,
}

/// What to do with ticks that passed while no replica could claim them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Misfire {
    /// Run only the latest missed tick within the grace.
    RunOnce,
    /// Run none of them.
    Skip,
    /// Run each missed tick within the grace, oldest first, capped.
    RunAll,
}

/// What to do with a run whose replica died before recording an outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnHolderLost {
    /// Record `abandoned` and nothing more (at most once).
    Record,
    /// Record `abandoned` and run the tick again with a new fence (at least
    /// once).
    Rerun,
}

macro_rules! enum_names {
    ($ty:ty { $($variant:ident => $name:literal),* $(,)? }) => {
        impl $ty {
            /// The name used in the config file and in Redis.
            pub fn as_str(self) -> &'static str {
                match self { $(Self::$variant => $name),* }
            }
        }
        impl fmt::Display for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}
enum_names!(Overlap { Skip => "skip", Allow => "allow", Replace => "replace" });
enum_names!(Misfire { RunOnce => "run_once", Skip => "skip", RunAll => "run_all" });
enum_names!(OnHolderLost { Record => "record", Rerun => "rerun" });

/// One thing wrong with a config file, located as precisely as possible.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// 1-based line and column, when the problem has a place in the file.
    pub line_col: Option<(usize, usize)>,
    /// The section the problem is in: `redis`, `daemon` or `jobs.<name>`.
    pub section: Option<String>,
    pub field: Option<String>,
    pub message: String,
}

/// A config file that cannot be used, with every problem found in it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ConfigError {
    pub file: PathBuf,
    pub problems: Vec<Problem>,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.problems.len();
        write!(
            f,
            "invalid config {}: {n} problem{}",
            self.file.display(),
            if n == 1 { "" } else { "s" }
        )?;
        for problem in &self.problems {
            write!(f, "\n  {}", self.file.display())?;
            if let Some((line, col)) = problem.line_col {
                write!(f, ":{line}:{col}")?;
            }
            f.write_str(":")?;
            if let Some(section) = problem.section.as_deref() {
                match section.strip_prefix("jobs.") {
                    Some(job) => write!(f, " job {job:?}")?,
                    None => write!(f, " [{section}]")?,
                }
            }
            if let Some(field) = &problem.field {
                let sep = if problem.section.is_some() { "," } else { "" };
                write!(f, "{sep} field `{field}`")?;
            }
            if problem.section.is_some() || problem.field.is_some() {
                f.write_str(":")?;
            }
            write!(f, " {}", problem.message)?;
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------
// Stage one: the file as written.

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRedis {
    url: Option<Spanned<String>>,
    sentinels: Option<Spanned<Vec<String>>>,
    master_name: Option<Spanned<String>>,
    cluster: Option<Spanned<Vec<String>>>,
    quorum: Option<Spanned<Vec<String>>>,
    key_prefix: Option<Spanned<String>>,
    connect_timeout: Option<Spanned<String>>,
    command_timeout: Option<Spanned<String>>,
    username: Option<Spanned<String>>,
    password_env: Option<Spanned<String>>,
    password_file: Option<Spanned<String>>,
    ca_file: Option<Spanned<String>>,
    cert_file: Option<Spanned<String>>,
    key_file: Option<Spanned<String>>,
    insecure_skip_verify: Option<bool>,
    min_replicas_ack: Option<Spanned<i64>>,
    ack_timeout: Option<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDaemon {
    lease: Option<Spanned<String>>,
    shutdown_grace: Option<Spanned<String>>,
    kill_grace: Option<Spanned<String>>,
    replica_id: Option<Spanned<String>>,
    state_dir: Option<Spanned<String>>,
    history: Option<Spanned<i64>>,
    output_tail_bytes: Option<Spanned<i64>>,
    heartbeat: Option<Spanned<String>>,
    log_format: Option<LogFormat>,
    metrics_listen: Option<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawJob {
    schedule: Option<Spanned<String>>,
    timezone: Option<Spanned<String>>,
    command: Option<Spanned<Vec<String>>>,
    shell: Option<Spanned<String>>,
    workdir: Option<Spanned<String>>,
    #[serde(default)]
    env: BTreeMap<Spanned<String>, Spanned<String>>,
    timeout: Option<Spanned<String>>,
    overlap: Option<Overlap>,
    misfire: Option<Misfire>,
    misfire_grace: Option<Spanned<String>>,
    retries: Option<Spanned<i64>>,
    retry_backoff: Option<Spanned<String>>,
    on_holder_lost: Option<OnHolderLost>,
    dst_gap: Option<Spanned<DstGap>>,
    dst_repeat: Option<Spanned<DstRepeat>>,
    benchmark_noop: Option<Spanned<bool>>,
}

// ---------------------------------------------------------------------------
// Stage two: validation.

/// What makes two jobs' schedules the same parse.
#[derive(PartialEq, Eq, Hash)]
struct ScheduleKey {
    expression: String,
    zone: String,
    /// Only for expressions with `H`, whose values hash the job's name.
    job: Option<String>,
    dst: DstPolicy,
}

/// Collects problems for one file; knows the text, to turn spans into
/// line:column.
struct Checker<'a> {
    text: &'a str,
    problems: Vec<Problem>,
    /// Schedules parsed so far, by expression, zone and DST policy (and job
    /// name, when `H` makes the job part of the meaning): jobs that share
    /// them share one parse, so a table of 10,000 jobs on a handful of
    /// expressions holds a handful of parses.
    schedules: HashMap<ScheduleKey, Schedule>,
}

impl Checker<'_> {
    /// [`Schedule::parse`], once per distinct expression and zone.
    fn schedule(
        &mut self,
        expression: &str,
        zone: Zone,
        job: &str,
        dst: DstPolicy,
    ) -> Result<Schedule, ScheduleError> {
        let key = ScheduleKey {
            expression: expression.to_string(),
            zone: zone.name().to_string(),
            job: expression.contains('H').then(|| job.to_string()),
            dst,
        };
        if let Some(schedule) = self.schedules.get(&key) {
            return Ok(schedule.clone());
        }
        let schedule = Schedule::parse(expression, zone, job, dst)?;
        self.schedules.insert(key, schedule.clone());
        Ok(schedule)
    }

    fn problem(
        &mut self,
        span: Option<Range<usize>>,
        section: Option<&str>,
        field: Option<&str>,
        message: String,
    ) {
        let line_col = span.map(|s| line_col(self.text, s.start));
        self.problems.push(Problem {
            line_col,
            section: section.map(str::to_string),
            field: field.map(str::to_string),
            message,
        });
    }

    /// Deserializes one table into `T`, recording each key that fails and
    /// retrying without it, so one bad key does not hide the next.
    fn deserialize_table<T: DeserializeOwned>(
        &mut self,
        section: &str,
        table: &Spanned<DeValue<'_>>,
    ) -> Option<T> {
        let span = table.span();
        let DeValue::Table(table) = table.get_ref() else {
            self.problem(
                Some(span),
                Some(section),
                None,
                format!("expected a table, found {}", table.get_ref().type_str()),
            );
            return None;
        };
        let mut table: DeTable<'_> = table.clone();
        // Keys dropped after failing; their problems are recorded already, so
        // what still deserializes is checked further and the config is
        // rejected all the same.
        let mut dropped: Vec<String> = Vec::new();
        loop {
            let value = Spanned::new(span.clone(), DeValue::Table(table.clone()));
            let error = match T::deserialize(ValueDeserializer::from(value)) {
                Ok(parsed) => return Some(parsed),
                Err(error) => error,
            };
            let message = error.message().trim_end_matches('\n').to_string();
            // A required key we already dropped for being invalid: reported.
            if dropped
                .iter()
                .any(|key| message.contains(&format!("missing field `{key}`")))
            {
                return None;
            }
            let culprit = error.span().and_then(|bad| {
                table
                    .iter()
                    .find(|(k, v)| contains(&k.span(), &bad) || contains(&v.span(), &bad))
                    .map(|(k, _)| k.get_ref().to_string())
            });
            let field = culprit.as_deref().or_else(|| missing_field(&message));
            self.problem(error.span(), Some(section), field, message.clone());
            match culprit {
                Some(key) => {
                    table = table
                        .into_iter()
                        .filter(|(k, _)| k.get_ref() != key.as_str())
                        .collect();
                    dropped.push(key);
                }
                None => return None,
            }
        }
    }

    fn duration(
        &mut self,
        section: &str,
        field: &str,
        value: Option<&Spanned<String>>,
        default: Duration,
        max: Duration,
    ) -> Duration {
        let Some(value) = value else { return default };
        match parse_duration(value.get_ref(), max) {
            Ok(d) => d,
            Err(message) => {
                self.problem(Some(value.span()), Some(section), Some(field), message);
                default
            }
        }
    }

    fn integer(
        &mut self,
        section: &str,
        field: &str,
        value: Option<&Spanned<i64>>,
        default: i64,
        range: Range<i64>,
    ) -> i64 {
        let Some(value) = value else { return default };
        let n = *value.get_ref();
        if range.contains(&n) {
            n
        } else {
            self.problem(
                Some(value.span()),
                Some(section),
                Some(field),
                format!(
                    "{n} is out of range: expected {} to {}",
                    range.start,
                    range.end - 1
                ),
            );
            default
        }
    }
}

fn contains(outer: &Range<usize>, inner: &Range<usize>) -> bool {
    outer.start <= inner.start && inner.end <= outer.end
}

fn missing_field(message: &str) -> Option<&str> {
    message.strip_prefix("missing field `")?.split('`').next()
}

/// 1-based line and column (in characters) of byte `offset` in `text`.
fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    (line, before[line_start..].chars().count() + 1)
}

/// Parses "500ms", "30s", "5m", "1h", "1h 30m"; rejects zero and anything
/// above `max`.
pub fn parse_duration(text: &str, max: Duration) -> Result<Duration, String> {
    let expected = "expected a duration such as \"500ms\", \"30s\", \"5m\" or \"1h\"";
    let d = humantime::parse_duration(text.trim())
        .map_err(|e| format!("invalid duration {text:?} ({e}): {expected}"))?;
    if d.is_zero() {
        return Err(format!(
            "duration {text:?} is zero: {expected}, greater than zero"
        ));
    }
    if d > max {
        return Err(format!(
            "duration {text:?} is too long: at most {}",
            humantime::format_duration(max)
        ));
    }
    Ok(d)
}

/// `[A-Za-z0-9_.-]`, 1 to `max_len` characters.
fn is_name(name: &str, max_len: usize) -> bool {
    !name.is_empty()
        && name.len() <= max_len
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

/// Replaces the password (or lone user token) of a Redis URL with `***`.
pub fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    match rest[..authority_end].rfind('@') {
        Some(at) => {
            let userinfo = &rest[..at];
            let redacted = match userinfo.split_once(':') {
                Some((user, _password)) => format!("{user}:***"),
                None => "***".to_string(),
            };
            format!("{scheme}://{redacted}{}", &rest[at..])
        }
        None => url.to_string(),
    }
}

const MAX_LEASE: Duration = Duration::from_secs(3600);
const MIN_LEASE: Duration = Duration::from_secs(1);
const MAX_GRACE: Duration = Duration::from_secs(3600);
const MAX_JOB_DURATION: Duration = Duration::from_secs(7 * 24 * 3600);

impl Config {
    /// Reads and validates the file at `path`.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = read_config_file(path).map_err(|message| ConfigError {
            file: path.to_path_buf(),
            problems: vec![Problem {
                line_col: None,
                section: None,
                field: None,
                message,
            }],
        })?;
        Config::parse(&text, path)
    }

    /// Validates `text` as if read from `path` (relative `workdir`s resolve
    /// against its directory). Validity does not depend on today's date: a
    /// job whose last year has passed is valid (see [`Config::warnings`]).
    pub fn parse(text: &str, path: &Path) -> Result<Config, ConfigError> {
        let mut checker = Checker {
            text,
            problems: Vec::new(),
            schedules: HashMap::new(),
        };
        let config = parse_document(&mut checker, path);
        let mut problems = checker.problems;
        match config {
            Some(config) if problems.is_empty() => Ok(config),
            _ => {
                // In file order; problems without a place (missing keys) last.
                problems.sort_by_key(|p| (p.line_col.is_none(), p.line_col));
                Err(ConfigError {
                    file: path.to_path_buf(),
                    problems,
                })
            }
        }
    }
}

impl Config {
    /// What is valid but probably not meant, one line each, for `check`,
    /// the log at start and reload, and `status`: today, jobs whose
    /// schedule has no fire time after `now` (a year field that has passed).
    pub fn warnings(&self, now: DateTime<Utc>) -> Vec<String> {
        self.jobs
            .values()
            .filter_map(|job| job_warning(job, now).map(|w| format!("job {:?}: {w}", job.name)))
            .collect()
    }
}

/// Why `job` will not run again, if it will not.
pub fn job_warning(job: &Job, now: DateTime<Utc>) -> Option<String> {
    if job.schedule.next_after(now).is_some() {
        return None;
    }
    let years = match job.schedule.last_year() {
        Some(year) => format!(" (its year field ends at {year})"),
        None => String::new(),
    };
    Some(format!(
        "schedule {:?} has no fire time after {}{years}: the job will not run again; \
         remove it or change its years",
        job.schedule.expression(),
        now.format("%Y-%m-%d %H:%M:%S UTC"),
    ))
}

fn read_config_file(path: &Path) -> Result<String, String> {
    let file = std::fs::File::open(path).map_err(|e| format!("cannot open config file: {e}"))?;
    let mut bytes = Vec::new();
    file.take(MAX_CONFIG_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read config file: {e}"))?;
    if bytes.len() as u64 > MAX_CONFIG_BYTES {
        return Err(format!(
            "config file is larger than {MAX_CONFIG_BYTES} bytes (1 MiB): is this the right file?"
        ));
    }
    String::from_utf8(bytes).map_err(|e| {
        format!(
            "config file is not UTF-8 text (invalid byte at offset {})",
            e.utf8_error().valid_up_to()
        )
    })
}

fn parse_document(checker: &mut Checker<'_>, path: &Path) -> Option<Config> {
    let (root, errors) = DeTable::parse_recoverable(checker.text);
    if !errors.is_empty() {
        let mut duplicate_spans = Vec::new();
        for error in errors {
            let message = error.message().trim_end_matches('\n');
            match error.span() {
                Some(span) if message == "duplicate key" => duplicate_spans.push(span),
                span => checker.problem(span, None, None, format!("invalid TOML: {message}")),
            }
        }
        for duplicate in duplicates::explain(checker.text, &duplicate_spans) {
            let at = duplicate.offset;
            checker.problem(Some(at..at), None, None, duplicate.message);
        }
        return None;
    }
    let mut redis_raw = None;
    let mut daemon_raw = None;
    let mut jobs_raw: Vec<(String, Range<usize>, Option<RawJob>)> = Vec::new();
    let mut saw_jobs = false;
    for (key, value) in root.get_ref() {
        match key.get_ref().as_ref() {
            "redis" => redis_raw = Some(checker.deserialize_table::<RawRedis>("redis", value)),
            "daemon" => daemon_raw = Some(checker.deserialize_table::<RawDaemon>("daemon", value)),
            "jobs" => {
                saw_jobs = true;
                let DeValue::Table(jobs) = value.get_ref() else {
                    checker.problem(
                        Some(value.span()),
                        Some("jobs"),
                        None,
                        "expected a table of jobs: [jobs.<name>]".into(),
                    );
                    continue;
                };
                for (name, job) in jobs {
                    let section = format!("jobs.{}", name.get_ref());
                    let raw = checker.deserialize_table::<RawJob>(&section, job);
                    jobs_raw.push((name.get_ref().to_string(), name.span(), raw));
                }
            }
            other => checker.problem(
                Some(key.span()),
                None,
                None,
                format!("unknown section `{other}`: expected `redis`, `daemon` or `jobs`"),
            ),
        }
    }

    let redis = match redis_raw {
        None => {
            checker.problem(
                None,
                Some("redis"),
                Some("url"),
                "missing [redis] section: expected at least `url = \"redis://host:6379/0\"`".into(),
            );
            None
        }
        Some(raw) => raw.and_then(|raw| validate_redis(checker, raw)),
    };
    let daemon = match daemon_raw {
        None => validate_daemon(checker, RawDaemon::default_raw(), &redis),
        Some(raw) => raw.and_then(|raw| validate_daemon(checker, raw, &redis)),
    };
    if !saw_jobs {
        checker.problem(
            None,
            Some("jobs"),
            None,
            "no jobs: expected at least one [jobs.<name>] table".into(),
        );
    }
    let base_dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
    let base_dir = if base_dir.as_os_str().is_empty() {
        PathBuf::from(".")
    } else {
        base_dir
    };
    let base_dir = std::path::absolute(&base_dir).unwrap_or(base_dir);
    let mut jobs = BTreeMap::new();
    for (name, name_span, raw) in jobs_raw {
        let section = format!("jobs.{name}");
        if !is_name(&name, 128) {
            checker.problem(
                Some(name_span.clone()),
                Some(&section),
                None,
                format!(
                    "invalid job name {name:?}: expected 1 to 128 characters from A-Z a-z 0-9 _ . -"
                ),
            );
        }
        if let Some(job) =
            raw.and_then(|raw| validate_job(checker, &section, &name, raw, &base_dir))
        {
            let quorum = matches!(
                redis.as_ref().map(|r| &r.topology),
                Some(Topology::Quorum(_))
            );
            if quorum && job.on_holder_lost == OnHolderLost::Rerun {
                checker.problem(
                    Some(name_span),
                    Some(&section),
                    Some("on_holder_lost"),
                    "on_holder_lost = \"rerun\" is not available with `[redis] quorum` (a rerun would need its own quorum claim): expected \"record\"".into(),
                );
            }
            jobs.insert(name, job);
        }
    }
    Some(Config {
        source: path.to_path_buf(),
        redis: redis?,
        daemon: daemon?,
        jobs,
    })
}

impl RawDaemon {
    fn default_raw() -> RawDaemon {
        RawDaemon {
            lease: None,
            shutdown_grace: None,
            kill_grace: None,
            replica_id: None,
            state_dir: None,
            history: None,
            output_tail_bytes: None,
            heartbeat: None,
            log_format: None,
            metrics_listen: None,
        }
    }
}

/// The URL schemes a Redis endpoint may have, per topology.
const TCP_SCHEMES: &[&str] = &["redis", "rediss"];
const ALL_SCHEMES: &[&str] = &["redis", "rediss", "redis+unix", "unix"];

fn validate_redis(checker: &mut Checker<'_>, raw: RawRedis) -> Option<RedisConfig> {
    const S: &str = "redis";
    let topology = redis_topology(checker, &raw);
    let check_url = |checker: &mut Checker<'_>,
                     span: Range<usize>,
                     field: &str,
                     url: &str,
                     schemes: &[&str]| {
        let ok =
            redis::parse_redis_url(url).is_some_and(|parsed| schemes.contains(&parsed.scheme()));
        if !ok {
            let expected = if schemes.len() == ALL_SCHEMES.len() {
                "redis://[user:password@]host[:port][/db], rediss://… for TLS, or unix:///path/to/socket"
            } else {
                "redis://[user:password@]host[:port], or rediss://… for TLS"
            };
            checker.problem(
                Some(span),
                Some(S),
                Some(field),
                format!(
                    "invalid Redis URL {:?}: expected {expected}",
                    redact_url(url)
                ),
            );
        }
        ok
    };
    let mut urls_ok = true;
    let mut tls_urls = Vec::new();
    if let Some(url) = &raw.url {
        urls_ok &= check_url(checker, url.span(), "url", url.get_ref(), ALL_SCHEMES);
        tls_urls.push(url.get_ref().starts_with("rediss://"));
    }
    for (field, list, schemes, min) in [
        ("sentinels", &raw.sentinels, TCP_SCHEMES, 1),
        ("cluster", &raw.cluster, TCP_SCHEMES, 1),
        ("quorum", &raw.quorum, TCP_SCHEMES, 3),
    ] {
        let Some(list) = list else { continue };
        if list.get_ref().len() < min {
            urls_ok = false;
            let example = match field {
                "sentinels" => "[\"redis://10.0.0.1:26379\"]",
                "cluster" => "[\"redis://10.0.0.1:7000\"]",
                _ => {
                    "[\"redis://10.0.0.1:6379\", \"redis://10.0.0.2:6379\", \"redis://10.0.0.3:6379\"]"
                }
            };
            checker.problem(
                Some(list.span()),
                Some(S),
                Some(field),
                format!(
                    "`{field}` has {} URL(s): expected at least {min}, such as {example}",
                    list.get_ref().len()
                ),
            );
        }
        if field == "quorum" && has_duplicates(list.get_ref()) {
            urls_ok = false;
            checker.problem(
                Some(list.span()),
                Some(S),
                Some(field),
                "`quorum` names one server twice: expected independent masters, each listed once"
                    .into(),
            );
        }
        for url in list.get_ref() {
            urls_ok &= check_url(checker, list.span(), field, url, schemes);
            tls_urls.push(url.starts_with("rediss://"));
        }
    }
    let username = raw.username.as_ref().map(|u| u.get_ref().clone());
    let password = redis_password(checker, &raw);
    let tls = redis_tls(checker, &raw, &tls_urls);
    let connect_timeout = checker.duration(
        S,
        "connect_timeout",
        raw.connect_timeout.as_ref(),
        Duration::from_secs(5),
        Duration::from_secs(300),
    );
    let command_timeout = checker.duration(
        S,
        "command_timeout",
        raw.command_timeout.as_ref(),
        Duration::from_secs(2),
        Duration::from_secs(300),
    );
    let ack_timeout = checker.duration(
        S,
        "ack_timeout",
        raw.ack_timeout.as_ref(),
        DEFAULT_ACK_TIMEOUT,
        Duration::from_secs(60),
    );
    let min_replicas_ack = match &raw.min_replicas_ack {
        None => 0,
        Some(given) => match u32::try_from(*given.get_ref()) {
            Ok(k) if k <= 64 => {
                if k > 0 && raw.quorum.is_some() {
                    checker.problem(
                        Some(given.span()),
                        Some(S),
                        Some("min_replicas_ack"),
                        "min_replicas_ack does not apply to `quorum` (its masters have no replicas to wait for): expected 0 or no key; the quorum itself is the durability".into(),
                    );
                }
                if k > 0 && ack_timeout >= command_timeout {
                    checker.problem(
                        Some(raw.ack_timeout.as_ref().map_or(given.span(), Spanned::span)),
                        Some(S),
                        Some("ack_timeout"),
                        format!(
                            "ack_timeout {} must be shorter than command_timeout {}: the claim and its WAIT share one reply deadline",
                            humantime::format_duration(ack_timeout),
                            humantime::format_duration(command_timeout)
                        ),
                    );
                }
                k
            }
            _ => {
                checker.problem(
                    Some(given.span()),
                    Some(S),
                    Some("min_replicas_ack"),
                    format!("invalid min_replicas_ack {}: expected a number of Redis replicas from 0 (off) to 64", given.get_ref()),
                );
                0
            }
        },
    };
    let topology = topology.filter(|_| urls_ok);
    let key_prefix = match raw.key_prefix {
        None => DEFAULT_KEY_PREFIX.to_string(),
        Some(prefix) => {
            let ok = !prefix.get_ref().is_empty()
                && prefix.get_ref().len() <= 64
                && prefix
                    .get_ref()
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-' | b':'));
            if !ok {
                checker.problem(
                    Some(prefix.span()),
                    Some(S),
                    Some("key_prefix"),
                    format!("invalid key prefix {:?}: expected 1 to 64 characters from A-Z a-z 0-9 _ . - : (no braces: they would break the {{job}} hash tags)", prefix.get_ref()),
                );
            }
            prefix.into_inner()
        }
    };
    Some(RedisConfig {
        topology: topology?,
        key_prefix,
        connect_timeout,
        command_timeout,
        username,
        password: password.ok()?,
        tls: tls?,
        min_replicas_ack,
        ack_timeout,
    })
}

/// Which of `url`, `sentinels`, `cluster` and `quorum` is set: exactly one.
fn redis_topology(checker: &mut Checker<'_>, raw: &RawRedis) -> Option<Topology> {
    const S: &str = "redis";
    let given: Vec<(&str, Range<usize>)> = [
        ("url", raw.url.as_ref().map(Spanned::span)),
        ("sentinels", raw.sentinels.as_ref().map(Spanned::span)),
        ("cluster", raw.cluster.as_ref().map(Spanned::span)),
        ("quorum", raw.quorum.as_ref().map(Spanned::span)),
    ]
    .into_iter()
    .filter_map(|(name, span)| Some((name, span?)))
    .collect();
    match given.as_slice() {
        [] => {
            checker.problem(
                None,
                Some(S),
                Some("url"),
                "missing `url`: expected e.g. \"redis://127.0.0.1:6379/0\" (rediss:// for TLS), or one of `sentinels` (with `master_name`), `cluster`, `quorum`"
                    .into(),
            );
            return None;
        }
        [_] => {}
        [(first, _), rest @ ..] => {
            for (name, span) in rest {
                checker.problem(
                    Some(span.clone()),
                    Some(S),
                    Some(name),
                    format!("`{name}` and `{first}` are both set: expected exactly one of `url`, `sentinels`, `cluster`, `quorum`"),
                );
            }
            return None;
        }
    }
    if raw.sentinels.is_none()
        && let Some(name) = &raw.master_name
    {
        checker.problem(
            Some(name.span()),
            Some(S),
            Some("master_name"),
            "`master_name` is only used with `sentinels`".into(),
        );
    }
    if let Some(url) = &raw.url {
        return Some(Topology::Single(url.get_ref().clone()));
    }
    if let Some(sentinels) = &raw.sentinels {
        let Some(master_name) = raw.master_name.as_ref().filter(|n| !n.get_ref().is_empty()) else {
            checker.problem(
                Some(sentinels.span()),
                Some(S),
                Some("master_name"),
                "missing `master_name`: the name the sentinels monitor the master under (`sentinel monitor NAME …`), e.g. \"mymaster\"".into(),
            );
            return None;
        };
        return Some(Topology::Sentinel {
            sentinels: sentinels.get_ref().clone(),
            master_name: master_name.get_ref().clone(),
        });
    }
    if let Some(nodes) = &raw.cluster {
        return Some(Topology::Cluster(nodes.get_ref().clone()));
    }
    raw.quorum
        .as_ref()
        .map(|nodes| Topology::Quorum(nodes.get_ref().clone()))
}

/// Whether `urls` names one server twice (compared without a trailing `/`).
fn has_duplicates(urls: &[String]) -> bool {
    let mut seen = std::collections::HashSet::new();
    !urls
        .iter()
        .all(|url| seen.insert(url.trim_end_matches('/')))
}

/// The password from `password_env` or `password_file` (at most one).
/// `Err` when one is given and cannot be read.
fn redis_password(checker: &mut Checker<'_>, raw: &RawRedis) -> Result<Option<Secret>, ()> {
    const S: &str = "redis";
    match (&raw.password_env, &raw.password_file) {
        (None, None) => Ok(None),
        (Some(_), Some(file)) => {
            checker.problem(
                Some(file.span()),
                Some(S),
                Some("password_file"),
                "`password_env` and `password_file` are both set: expected one of them".into(),
            );
            Err(())
        }
        (Some(var), None) => match std::env::var(var.get_ref()) {
            Ok(value) if !value.is_empty() => Ok(Some(Secret::new(value))),
            _ => {
                checker.problem(
                    Some(var.span()),
                    Some(S),
                    Some("password_env"),
                    format!(
                        "environment variable {:?} is not set or empty: expected it to hold the Redis password (under systemd: `Environment=` or `EnvironmentFile=` in a drop-in)",
                        var.get_ref()
                    ),
                );
                Err(())
            }
        },
        (None, Some(file)) => {
            match std::fs::read_to_string(file.get_ref()) {
                Ok(text) if !text.trim_end_matches(['\r', '\n']).is_empty() => Ok(Some(
                    Secret::new(text.trim_end_matches(['\r', '\n']).to_string()),
                )),
                Ok(_) => {
                    checker.problem(
                        Some(file.span()),
                        Some(S),
                        Some("password_file"),
                        format!(
                            "{} is empty: expected the Redis password on its first line",
                            file.get_ref()
                        ),
                    );
                    Err(())
                }
                Err(e) => {
                    checker.problem(
                    Some(file.span()),
                    Some(S),
                    Some("password_file"),
                    format!("cannot read {}: {e}: expected a readable file holding the Redis password", file.get_ref()),
                );
                    Err(())
                }
            }
        }
    }
}

/// TLS files: each readable, certificate and key together, and only with
/// `rediss://` URLs.
fn redis_tls(checker: &mut Checker<'_>, raw: &RawRedis, tls_urls: &[bool]) -> Option<Tls> {
    const S: &str = "redis";
    let mut ok = true;
    let mut file = |checker: &mut Checker<'_>, field: &str, value: &Option<Spanned<String>>| {
        let value = value.as_ref()?;
        if let Err(e) = std::fs::read(value.get_ref()) {
            ok = false;
            checker.problem(
                Some(value.span()),
                Some(S),
                Some(field),
                format!(
                    "cannot read {}: {e}: expected a readable PEM file",
                    value.get_ref()
                ),
            );
        }
        Some((value.span(), PathBuf::from(value.get_ref())))
    };
    let ca_file = file(checker, "ca_file", &raw.ca_file);
    let cert_file = file(checker, "cert_file", &raw.cert_file);
    let key_file = file(checker, "key_file", &raw.key_file);
    match (&cert_file, &key_file) {
        (Some((span, _)), None) | (None, Some((span, _))) => {
            ok = false;
            checker.problem(
                Some(span.clone()),
                Some(S),
                Some(if cert_file.is_some() {
                    "key_file"
                } else {
                    "cert_file"
                }),
                "a client certificate needs both `cert_file` and `key_file`".into(),
            );
        }
        _ => {}
    }
    let insecure = raw.insecure_skip_verify.unwrap_or(false);
    let any_tls_setting = ca_file.is_some() || cert_file.is_some() || insecure;
    if any_tls_setting && !tls_urls.iter().any(|&tls| tls) {
        let span = [&ca_file, &cert_file, &key_file]
            .into_iter()
            .find_map(|f| f.as_ref().map(|(span, _)| span.clone()));
        ok = false;
        checker.problem(
            span,
            Some(S),
            Some(if ca_file.is_some() { "ca_file" } else if cert_file.is_some() { "cert_file" } else { "insecure_skip_verify" }),
            "TLS settings need rediss:// URLs: expected `rediss://host:port` where the server listens with TLS".into(),
        );
    }
    ok.then(|| Tls {
        ca_file: ca_file.map(|(_, path)| path),
        cert_file: cert_file.map(|(_, path)| path),
        key_file: key_file.map(|(_, path)| path),
        insecure_skip_verify: insecure,
    })
}

fn validate_daemon(
    checker: &mut Checker<'_>,
    raw: RawDaemon,
    redis: &Option<RedisConfig>,
) -> Option<DaemonConfig> {
    const S: &str = "daemon";
    let lease = checker.duration(
        S,
        "lease",
        raw.lease.as_ref(),
        Duration::from_secs(30),
        MAX_LEASE,
    );
    if let Some(span) = raw.lease.as_ref().map(Spanned::span) {
        if lease < MIN_LEASE {
            checker.problem(
                Some(span.clone()),
                Some(S),
                Some("lease"),
                format!(
                    "lease {} is too short: the watchdog renews every lease/3 and needs room for a Redis round trip and a retry; expected at least 1s",
                    humantime::format_duration(lease)
                ),
            );
        } else if let Some(redis) = redis
            && lease / 3 <= redis.command_timeout
        {
            checker.problem(
                Some(span),
                Some(S),
                Some("lease"),
                format!(
                    "lease {} is too short for its renewal period: renewals every {} would not outlast one [redis] command_timeout of {}; expected a lease above {}",
                    humantime::format_duration(lease),
                    humantime::format_duration(lease / 3),
                    humantime::format_duration(redis.command_timeout),
                    humantime::format_duration(redis.command_timeout * 3),
                ),
            );
        }
    }
    let shutdown_grace = checker.duration(
        S,
        "shutdown_grace",
        raw.shutdown_grace.as_ref(),
        Duration::from_secs(30),
        MAX_GRACE,
    );
    let kill_grace = checker.duration(
        S,
        "kill_grace",
        raw.kill_grace.as_ref(),
        Duration::from_secs(10),
        MAX_GRACE,
    );
    let heartbeat = checker.duration(
        S,
        "heartbeat",
        raw.heartbeat.as_ref(),
        Duration::from_secs(5),
        Duration::from_secs(300),
    );
    let replica_id = raw.replica_id.map(|id| {
        if !is_name(id.get_ref(), 128) {
            checker.problem(
                Some(id.span()),
                Some(S),
                Some("replica_id"),
                format!(
                    "invalid replica id {:?}: expected 1 to 128 characters from A-Z a-z 0-9 _ . -",
                    id.get_ref()
                ),
            );
        }
        id.into_inner()
    });
    let state_dir = match raw.state_dir {
        // systemd's StateDirectory= (the first, if several).
        None => std::env::var_os("STATE_DIRECTORY")
            .and_then(|dirs| std::env::split_paths(&dirs).next())
            .filter(|dir| !dir.as_os_str().is_empty())
            .unwrap_or_else(|| PathBuf::from(DEFAULT_STATE_DIR)),
        Some(dir) if dir.get_ref().trim().is_empty() => {
            checker.problem(
                Some(dir.span()),
                Some(S),
                Some("state_dir"),
                "empty path: expected a directory such as \"/var/lib/cronlease\"".into(),
            );
            PathBuf::new()
        }
        Some(dir) => PathBuf::from(dir.into_inner()),
    };
    let metrics_listen = match raw.metrics_listen {
        None => Some(
            DEFAULT_METRICS_LISTEN
                .parse()
                .expect("the default metrics address is a valid socket address"),
        ),
        Some(text) if text.get_ref().is_empty() => None,
        Some(text) => match text.get_ref().parse() {
            Ok(addr) => Some(addr),
            Err(_) => {
                checker.problem(
                    Some(text.span()),
                    Some(S),
                    Some("metrics_listen"),
                    format!("invalid address {:?}: expected IP:port such as \"127.0.0.1:9464\", or \"\" to turn metrics off", text.get_ref()),
                );
                None
            }
        },
    };
    let history = checker.integer(S, "history", raw.history.as_ref(), 1000, 1..1_000_001);
    let output_tail_bytes = checker.integer(
        S,
        "output_tail_bytes",
        raw.output_tail_bytes.as_ref(),
        4096,
        0..1_048_577,
    );
    Some(DaemonConfig {
        lease,
        shutdown_grace,
        kill_grace,
        replica_id,
        state_dir,
        history: u32::try_from(history).expect("history was checked to be within 1..=1_000_000"),
        output_tail_bytes: usize::try_from(output_tail_bytes)
            .expect("output_tail_bytes was checked to be within 0..=1 MiB"),
        heartbeat,
        log_format: raw.log_format.unwrap_or(LogFormat::Text),
        metrics_listen,
    })
}

/// The job's `dst_gap` and `dst_repeat`, defaults where unset.
fn dst_policy(raw: &RawJob) -> DstPolicy {
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
fn check_dst_policy(
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
                    "`{field}` applies to fixed-time jobs, and {:?} runs by the wall clock (its minute or hour field starts with `*`):                      local times the clock skips do not run, repeated ones run again; remove `{field}`,                      or give the minute and hour as numbers, lists or ranges",
                    schedule.expression()
                ),
            );
        }
    }
    valid.then_some(schedule)
}

fn validate_job(
    checker: &mut Checker<'_>,
    section: &str,
    name: &str,
    raw: RawJob,
    base_dir: &Path,
) -> Option<Job> {
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
    let schedule = match (&raw.schedule, timezone) {
        (None, _) => {
            checker.problem(None, Some(section), Some("schedule"), "missing `schedule`: expected a cron expression such as \"0 12 * * *\" or \"@hourly\"".into());
            None
        }
        (Some(expr), Some(tz)) => {
            match checker.schedule(expr.get_ref(), tz, name, dst_policy(&raw)) {
                Ok(schedule) => check_dst_policy(checker, section, &raw, schedule),
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
    };
    let noop = raw.benchmark_noop.filter(|noop| *noop.get_ref());
    let command = match (raw.command, raw.shell) {
        (None, None) if noop.is_some() => Some(Command::BenchmarkNoop),
        (Some(_), _) | (_, Some(_)) if noop.is_some() => {
            let span = noop.map(|n| n.span());
            checker.problem(
                span,
                Some(section),
                Some("benchmark_noop"),
                "`benchmark_noop` runs nothing and cannot be combined with `command` or `shell`"
                    .into(),
            );
            None
        }
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
    };
    let workdir = match raw.workdir {
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
    };
    let mut env = BTreeMap::new();
    for (key, value) in raw.env {
        let k = key.get_ref();
        let valid_key = !k.is_empty() && !k.contains(['=', '\0']);
        if !valid_key {
            checker.problem(
                Some(key.span()),
                Some(section),
                Some("env"),
                format!(
                    "invalid variable name {k:?}: expected a non-empty name without '=' or NUL"
                ),
            );
        } else if k.starts_with(RESERVED_ENV_PREFIX) {
            checker.problem(Some(key.span()), Some(section), Some("env"), format!("{k} is reserved: cronlease sets the {RESERVED_ENV_PREFIX}* variables of every run"));
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
    Some(Job {
        name: name.to_string(),
        schedule: schedule?,
        command: command?,
        workdir,
        env,
        timeout,
        overlap: raw.overlap.unwrap_or(Overlap::Skip),
        misfire: raw.misfire.unwrap_or(Misfire::RunOnce),
        misfire_grace,
        retries: u32::try_from(retries).expect("retries was checked to be within 0..=100"),
        retry_backoff,
        on_holder_lost: raw.on_holder_lost.unwrap_or(OnHolderLost::Record),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Config, ConfigError> {
        Config::parse(text, Path::new("/etc/cronlease/jobs.toml"))
    }

    #[test]
    fn durations() {
        let check = |text: &str, expected: Result<u64, &str>| {
            let got = parse_duration(text, Duration::from_secs(3600)).map(|d| d.as_millis() as u64);
            match (got, expected) {
                (Ok(ms), Ok(want)) => assert_eq!(ms, want, "{text}"),
                (Err(message), Err(fragment)) => {
                    assert!(message.contains(fragment), "{text}: {message}")
                }
                (got, want) => panic!("{text}: got {got:?}, want {want:?}"),
            }
        };
        check("500ms", Ok(500));
        check("30s", Ok(30_000));
        check("5m", Ok(300_000));
        check("1h", Ok(3_600_000));
        check("1m 30s", Ok(90_000));
        check("0s", Err("is zero"));
        check("2h", Err("too long"));
        check("5", Err("invalid duration"));
        check("soon", Err("invalid duration"));
    }

    #[test]
    fn line_and_column() {
        let text = "a\nbc\n\u{e9}x";
        assert_eq!(line_col(text, 0), (1, 1));
        assert_eq!(line_col(text, 3), (2, 2));
        assert_eq!(line_col(text, 7), (3, 2));
    }

    #[test]
    fn urls_are_redacted() {
        assert_eq!(
            redact_url("redis://u:secret@h:6379/0"),
            "redis://u:***@h:6379/0"
        );
        assert_eq!(redact_url("rediss://:secret@h/0"), "rediss://:***@h/0");
        assert_eq!(redact_url("redis://token@h"), "redis://***@h");
        assert_eq!(redact_url("redis://h:6379/0"), "redis://h:6379/0");
    }

    #[test]
    fn defaults_and_resolution() {
        let config = parse(
            "[redis]\nurl = \"redis://127.0.0.1:6390/2\"\n[jobs.a]\nschedule = \"@hourly\"\nshell = \"echo hi\"\nworkdir = \"work\"\n",
        )
        .unwrap();
        assert_eq!(config.redis.key_prefix, "cronlease");
        assert_eq!(config.daemon.lease, Duration::from_secs(30));
        assert_eq!(config.daemon.state_dir, PathBuf::from(DEFAULT_STATE_DIR));
        assert_eq!(config.daemon.history, 1000);
        let job = &config.jobs["a"];
        assert_eq!(job.command, Command::Shell("echo hi".into()));
        assert_eq!(job.workdir, PathBuf::from("/etc/cronlease/work"));
        assert_eq!(job.overlap, Overlap::Skip);
        assert_eq!(job.misfire, Misfire::RunOnce);
        assert_eq!(job.on_holder_lost, OnHolderLost::Record);
        assert_eq!(job.timeout, None);
        assert_eq!(job.retries, 0);
    }

    #[test]
    fn the_password_never_appears_in_errors_or_debug() {
        let err = parse("[redis]\nurl = \"ftp://u:hunter2@h\"\n[jobs.a]\nschedule = \"@daily\"\ncommand = [\"x\"]\n").unwrap_err();
        assert!(!err.to_string().contains("hunter2"), "{err}");
        let config = parse("[redis]\nurl = \"redis://u:hunter2@h\"\n[jobs.a]\nschedule = \"@daily\"\ncommand = [\"x\"]\n").unwrap();
        assert!(!format!("{config:?}").contains("hunter2"));
    }

    #[test]
    fn redis_deployments_are_checked_with_the_field_that_is_wrong() {
        let redis = |section: &str| {
            let text =
                format!("[redis]\n{section}\n[jobs.a]\nschedule = \"@daily\"\ncommand = [\"x\"]\n");
            parse(&text).map(|c| c.redis).map_err(|e| e.to_string())
        };
        let expect_error = |section: &str, fragment: &str| {
            let err = redis(section).expect_err(section);
            assert!(err.contains(fragment), "{section}: {err}");
        };
        expect_error(
            "url = \"redis://h\"\ncluster = [\"redis://h:7000\"]",
            "`cluster` and `url` are both set",
        );
        expect_error(
            "sentinels = [\"redis://h:26379\"]",
            "field `master_name`: missing `master_name`",
        );
        expect_error(
            "quorum = [\"redis://a\", \"redis://b\"]",
            "field `quorum`: `quorum` has 2 URL(s): expected at least 3",
        );
        expect_error(
            "quorum = [\"redis://a\", \"redis://b\", \"redis://a/\"]",
            "`quorum` names one server twice",
        );
        expect_error(
            "quorum = [\"redis://a\", \"redis://b\", \"redis://c\"]\nmin_replicas_ack = 1",
            "min_replicas_ack does not apply to `quorum`",
        );
        assert!(matches!(
            redis("quorum = [\"redis://a\", \"redis://b\", \"redis://c\"]").map(|r| r.topology),
            Ok(Topology::Quorum(nodes)) if nodes.len() == 3
        ));
        let rerun = parse(
            "[redis]\nquorum = [\"redis://a\", \"redis://b\", \"redis://c\"]\n\
             [jobs.draw]\nschedule = \"@daily\"\ncommand = [\"x\"]\non_holder_lost = \"rerun\"\n",
        )
        .expect_err("rerun with quorum");
        assert!(
            rerun
                .to_string()
                .contains("job \"draw\", field `on_holder_lost`: on_holder_lost = \"rerun\" is not available with `[redis] quorum`"),
            "{rerun}"
        );
        expect_error(
            "url = \"redis://h\"\npassword_env = \"CRONLEASE_SURELY_UNSET_VAR\"",
            "environment variable \"CRONLEASE_SURELY_UNSET_VAR\" is not set",
        );
        expect_error(
            "url = \"redis://h\"\ninsecure_skip_verify = true",
            "TLS settings need rediss:// URLs",
        );
        expect_error(
            "url = \"rediss://h\"\nca_file = \"/nonexistent/ca.pem\"",
            "field `ca_file`: cannot read /nonexistent/ca.pem",
        );
        expect_error(
            "url = \"redis://h\"\nmin_replicas_ack = 1\nack_timeout = \"3s\"",
            "ack_timeout 3s must be shorter than command_timeout 2s",
        );
        let sentinel = redis(
            "sentinels = [\"redis://:pw@h:26379\"]\nmaster_name = \"mymaster\"\nmin_replicas_ack = 1",
        )
        .unwrap();
        assert_eq!(sentinel.min_replicas_ack, 1);
        assert_eq!(
            sentinel.describe(),
            "master \"mymaster\" via sentinels redis://:***@h:26379"
        );
        let cluster = redis("cluster = [\"redis://a:7000\", \"redis://b:7000\"]").unwrap();
        assert_eq!(cluster.describe(), "cluster redis://a:7000, redis://b:7000");
    }
}
