//! The job table: the TOML file every replica loads, read in two stages.
//!
//! Stage one mirrors the file: `Raw*` structs deserialized by serde with
//! `deny_unknown_fields`, every value still as written (strings for
//! durations, cron expressions and zones) and wrapped in [`Spanned`](toml::Spanned) so a
//! problem found later can still name its line and column. Stage two,
//! [`Config::parse`], validates those into [`Config`]: parsed schedules,
//! [`Duration`]s, a [`Zone`](crate::schedule::Zone), checked names. Nothing stringly typed leaves this
//! module.
//!
//! A job's stage one is `JobSpec`, which an embedded job's builder
//! makes too (its values typed, with no place), and its stage two one
//! validator for both, one job at a time (`validate_specs` for the
//! library): a job is worded alike whichever way it came.
//!
//! The loader reports **every** problem it finds, not the first: the TOML
//! syntax errors of the whole file; then each section and each job is
//! deserialized on its own, and a key that fails (an unknown key, a value of
//! the wrong type) is recorded and dropped so the rest of that table is still
//! checked; then the semantic checks run on whatever deserialized. A config
//! with any problem is rejected whole: there is no half-applied table.
//!
//! The files: this one holds the validated types (`access` those of the
//! dashboard's and the API's tokens); `document` the walk of the document
//! (syntax, sections, the jobs table) behind [`Config::load`] and
//! [`Config::parse`]; `checker` the problem collector and the value
//! checks every section uses; `redis_section`, `daemon_section` and `job`
//! the raw type and validator of `[redis]`, `[daemon]` and `[jobs.<name>]`
//! (`job`: `JobSpec`, `JobContext` and the job validator);
//! `environment` every read of the environment and of files other than the
//! text being checked; `duplicates` the explanation of TOML's duplicate-key
//! errors.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Deserialize;

mod access;
pub use access::{
    DashboardConfig, DashboardRole, DashboardTokenSpec, JobPattern, LEGACY_TOKEN_NAME,
    OidcRoleSpec, OidcSpec, TokenSource,
};
mod calendars;
mod chain;
pub use chain::{After, AfterOn, AfterParams, Follower, Join};
pub(crate) use chain::{check_given_chains, followers_of};
mod checker;
mod daemon_section;
mod dashboard_oidc;
mod dashboard_tokens;
mod definition;
mod document;
mod duplicates;
mod environment;
mod groups;
pub(crate) use environment::{MAX_PEM_FILE, read_bounded};
pub use groups::JobGroup;
mod http_job;
pub use http_job::{HttpRequest, Redirects};
mod job;
pub(crate) use job::{JobContext, JobSpec, validate_specs};
pub(crate) use params::RawParam;
mod notify_channels;
pub(crate) use notify_channels::is_channel_name;
pub use notify_channels::{
    ChannelSpec, EmailSpec, SIGNATURE_HEADER, SlackSpec, SmtpTls, WebhookSpec,
};
mod notify_rules;
// `EventSet` is the type of `NotifyRules::on`, named by the delivery.
#[allow(unused_imports)]
pub use notify_rules::{DaemonNotify, EventKind, EventSet, NotifyRules};
mod outline;
mod params;
mod placement;
mod problem;
#[cfg(feature = "dashboard")]
pub use params::MAX_PARAM_VALUE_BYTES;
pub use params::{
    Encoding, PARAM_FIELD_PREFIX, ParamError, ParamValues, Params, env_name as param_env_name,
    is_param_name, substitute, value_problem as param_value_problem,
};
pub(crate) use placement::is_tag;
pub use placement::{Mode, tags_match};
pub use problem::{ConfigError, Problem};
mod redis_section;
mod run_env;
mod telemetry;
pub(crate) use telemetry::is_header_name;
pub use telemetry::{HeaderSource, OtlpProtocol, TelemetryConfig};
mod timetable;
pub use run_env::{ALWAYS_SECRET_ENV, DEFAULT_INHERITED_ENV, pattern_matches};
pub(crate) use timetable::{Expressions, Moment};

pub(crate) use checker::{DurationValue, Given, is_name};
pub use checker::{parse_duration, redact_url};
pub(crate) use daemon_section::{MAX_LEASE, MIN_LEASE, renewable};
pub(crate) use job::Source;

use crate::schedule::Timetable;

/// Files larger than this are refused before parsing: a job table is a few
/// kilobytes, 100,000 jobs about 6 MB, and a file of 64 MiB is a mistake
/// (or `/dev/zero`).
pub const MAX_CONFIG_BYTES: u64 = 64 * 1024 * 1024;

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
    /// The notification channels (`[notify.<name>]`) by name.
    pub notify: BTreeMap<String, ChannelSpec>,
    /// The dashboard's and the API's tokens (`[dashboard]`), read again
    /// by a reload.
    pub dashboard: DashboardConfig,
    /// The replica id given on the command line (`cronlease run
    /// --replica-id`), which wins over `[daemon] replica_id`; kept apart
    /// so that a reload compares the file with the file.
    pub replica_id_flag: Option<String>,
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
    /// The variable `password_env` names: a secret no run inherits.
    pub password_env: Option<String>,
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
            .field("password_env", &self.password_env)
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
            password_env: None,
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
    /// Between SIGTERM and SIGKILL when a run is stopped (timeout,
    /// shutdown, `cronlease kill`).
    pub kill_grace: Duration,
    /// This replica's name in Redis; `None` means `<hostname>-<pid>-<hex>`.
    pub replica_id: Option<String>,
    /// Where outcomes that could not reach Redis are spooled. Default:
    /// `$STATE_DIRECTORY` (set by systemd's `StateDirectory=`), else
    /// `/var/lib/cronlease`.
    pub state_dir: PathBuf,
    /// Approximate number of outcomes kept per job (`XADD MAXLEN ~`).
    pub history: u32,
    /// How many runs this replica keeps in flight at once, whatever
    /// started them (`max_runs`); a replica with that many leaves ticks,
    /// manual runs, followers and backfill ticks to the others. None: no
    /// limit.
    pub max_runs: Option<u32>,
    /// Bytes of a run's output kept in its outcome record (the tail).
    pub output_tail_bytes: usize,
    /// Lines of a run's live output kept in Redis while it runs (see
    /// [`crate::live`]); 0: none sent.
    pub live_output_lines: usize,
    /// The most the spool's files may hold, in bytes: an outcome that
    /// would pass it is not written to disk but kept in memory (the guide,
    /// "The job table", `[daemon]`).
    pub spool_max_bytes: u64,
    /// How often the replica writes its heartbeat.
    pub heartbeat: Duration,
    pub log_format: LogFormat,
    /// Where `/metrics` and `/healthz` are served; `None` turns them off.
    pub metrics_listen: Option<std::net::SocketAddr>,
    /// Where the dashboard is served; `None` turns it off.
    pub dashboard_listen: Option<std::net::SocketAddr>,
    /// How runs' processes are kept together.
    pub containment: ContainmentSetting,
    /// Where the dashboard's operator token comes from; `None` leaves the
    /// dashboard read-only.
    pub dashboard_token: Option<TokenSource>,
    /// Which of the replica's variables every run inherits besides
    /// [`DEFAULT_INHERITED_ENV`] (never one of [`Config::secret_env_names`]).
    pub inherit_env: Vec<EnvPattern>,
    /// Whether reading the dashboard's pages needs the login, when a token
    /// is configured (without one there is no login: pages are public).
    pub dashboard_read: DashboardRead,
    /// Host names the dashboard and `/metrics` answer to besides their
    /// listen address and loopback (`localhost`, `127.0.0.1`, `[::1]`),
    /// lowercased: a request naming any other host gets 400.
    pub dashboard_hosts: Vec<String>,
    /// The most connections each HTTP server (dashboard, metrics) serves
    /// at once; also at most an eighth of the soft limit on open files.
    pub http_max_connections: usize,
    /// The notification settings of `[daemon]`: the jobs' defaults, the
    /// rule for `replica_dead`, the delivery's retry and the dashboard's
    /// external URL.
    pub notify: DaemonNotify,
    /// The replica's tags (`[daemon] tags`), sorted: a job's `run_on`
    /// names those a replica must have to start its runs.
    pub tags: Vec<String>,
    /// `[daemon.telemetry]`: where the spans of runs and claims are
    /// exported (OTLP); None: nowhere, and they cost nothing.
    pub telemetry: Option<TelemetryConfig>,
}

/// A name in `inherit_env`: a variable's name, or a prefix ending in `*`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnvPattern(String);

impl Config {
    /// This replica's id as configured: the command line's, else the
    /// file's; None lets the daemon make one.
    pub fn replica_id(&self) -> Option<&str> {
        self.replica_id_flag
            .as_deref()
            .or(self.daemon.replica_id.as_deref())
    }

    /// Whether `reloaded` (the same file, read again) changes settings that
    /// only a restart applies: `[redis]`, or `[daemon]` but a replica id
    /// the command line overrides.
    pub fn restart_settings_differ(&self, reloaded: &Config) -> bool {
        let daemon_differs = if self.replica_id_flag.is_some() {
            let mut reloaded_daemon = reloaded.daemon.clone();
            reloaded_daemon.replica_id = self.daemon.replica_id.clone();
            reloaded_daemon != self.daemon
        } else {
            reloaded.daemon != self.daemon
        };
        reloaded.redis != self.redis || daemon_differs
    }

    /// The replica's variables that hold its secrets: none of them reaches
    /// a run, whatever `inherit_env` says.
    pub fn secret_env_names(&self) -> Vec<String> {
        let mut names = secret_env_names(
            self.redis.password_env.as_deref(),
            self.daemon.dashboard_token.as_ref(),
        );
        let channels = self.notify.values().filter_map(ChannelSpec::secret_env);
        names.extend(channels.map(str::to_string));
        let telemetry = self.daemon.telemetry.iter();
        names.extend(telemetry.flat_map(|t| t.secret_env_names().map(str::to_string)));
        names.extend(
            self.dashboard
                .tokens
                .iter()
                .filter_map(|t| match &t.source {
                    TokenSource::Env(name) => Some(name.clone()),
                    TokenSource::File(_) => None,
                }),
        );
        if let Some(TokenSource::Env(name)) = self.dashboard.oidc.as_ref().map(|o| &o.client_secret)
        {
            names.push(name.clone());
        }
        names
    }
}

/// Whether `name` can name an environment variable the config reads
/// (`*_env`): letters, digits and `_`, not empty, not starting with a
/// digit.
pub(crate) fn is_env_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .enumerate()
            .all(|(i, c)| c == '_' || c.is_ascii_alphabetic() || (i > 0 && c.is_ascii_digit()))
}

/// [`Config::secret_env_names`] from its parts (also while validating).
pub fn secret_env_names(
    password_env: Option<&str>,
    dashboard_token: Option<&TokenSource>,
) -> Vec<String> {
    let mut names: Vec<String> = ALWAYS_SECRET_ENV.iter().map(|s| s.to_string()).collect();
    names.extend(password_env.map(str::to_string));
    if let Some(TokenSource::Env(name)) = dashboard_token {
        names.push(name.clone());
    }
    names
}

/// `[daemon] dashboard_read`: who may read the dashboard's pages when an
/// operator token is configured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DashboardRead {
    /// Only a logged-in browser (the session cookie); others are sent to
    /// the login page.
    #[default]
    Token,
    /// Anyone who can reach it; actions still need the login.
    Public,
}

impl DashboardRead {
    /// The setting's values, as written in the config.
    pub const NAMES: [&str; 2] = ["token", "public"];

    /// The value named `name` in the config.
    pub fn parse(name: &str) -> Option<DashboardRead> {
        match name {
            "token" => Some(DashboardRead::Token),
            "public" => Some(DashboardRead::Public),
            _ => None,
        }
    }
}

/// The default of `[daemon] http_max_connections`.
pub const DEFAULT_HTTP_MAX_CONNECTIONS: usize = 256;

/// `[daemon] containment`: how a replica keeps each run's processes
/// together so that none outlives the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ContainmentSetting {
    /// A cgroup per run where the replica can make one, else process
    /// groups (logged).
    #[default]
    Auto,
    /// A cgroup per run, or the replica does not start.
    Cgroup,
    /// Process groups only (what leaves its group escapes).
    ProcessGroup,
}

/// Where metrics are served unless the config says otherwise.
pub const DEFAULT_METRICS_LISTEN: &str = "127.0.0.1:9464";

/// Where the dashboard is served unless the config says otherwise: its own
/// port next to the metrics', on loopback (the guide, "Dashboard").
pub const DEFAULT_DASHBOARD_LISTEN: &str = "127.0.0.1:9465";

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
    /// Its schedules and active window; None for a job that only
    /// follows others (`after`).
    pub schedule: Option<Timetable>,
    /// How many ticks of the schedule may start a run, counted across the
    /// cluster in the job's state (`max_runs`); None: no limit.
    pub max_runs: Option<u32>,
    /// The jobs whose outcomes start this one's runs.
    pub after: Option<After>,
    /// The jobs this one's outcomes start (from the others' `after`).
    pub followers: Vec<Follower>,
    pub command: Command,
    /// Absolute; relative paths in the file are resolved against the file's
    /// directory.
    pub workdir: PathBuf,
    pub env: BTreeMap<String, String>,
    /// Which of the replica's variables this job's runs inherit besides
    /// the default list and `[daemon] inherit_env`.
    pub inherit_env: Vec<EnvPattern>,
    /// Files of `NAME=value` lines read at each run (secrets for the job;
    /// their values are redacted from its output).
    pub env_files: Vec<PathBuf>,
    /// Variable → systemd credential name, read from
    /// `$CREDENTIALS_DIRECTORY` at each run (redacted like `env_files`).
    pub env_credentials: BTreeMap<String, String>,
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
    /// What becomes of processes the command leaves behind in its cgroup
    /// when it exits.
    pub leftovers: Leftovers,
    /// Resource limits of each attempt's cgroup.
    pub limits: Limits,
    /// Which events of the job go to which channels.
    pub notify: NotifyRules,
    /// The inputs a run may be given (`params`); ticks of the schedule
    /// run with the defaults.
    pub params: Params,
    /// The calendars that leave ticks of the schedule out (`exclude`,
    /// `only`): see [`Job::excluded_by`].
    pub calendars: crate::calendar::JobCalendars,
    /// The tags a replica must have to start a run of the job (`run_on`),
    /// sorted; empty: any replica.
    pub run_on: Vec<String>,
    /// One run per tick, or one on every matching replica (`mode`).
    pub mode: Mode,
    /// The concurrency group whose slots the job's runs take (`group`):
    /// at most its `max` runs of its jobs at once across the cluster.
    pub group: Option<JobGroup>,
}

/// A job's `memory_max`, `cpu_max` and `tasks_max`: written to each
/// attempt's cgroup (`memory.max`, `cpu.max`, `pids.max`). Each needs runs
/// in cgroups and its controller; a replica without them refuses the job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Limits {
    pub memory_max_bytes: Option<u64>,
    /// Percent of one CPU (150: one and a half).
    pub cpu_max_percent: Option<u32>,
    pub tasks_max: Option<u32>,
}

impl Limits {
    /// The cgroup controllers these limits need.
    pub fn controllers(&self) -> Vec<&'static str> {
        let mut needed = Vec::new();
        if self.memory_max_bytes.is_some() {
            needed.push("memory");
        }
        if self.cpu_max_percent.is_some() {
            needed.push("cpu");
        }
        if self.tasks_max.is_some() {
            needed.push("pids");
        }
        needed
    }
}

/// What a run's leftover processes get when its command exits (runs in
/// cgroups only: without one they cannot all be found).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Leftovers {
    /// Killed, and logged with their pids and command lines.
    #[default]
    Kill,
    /// Waited for: the run ends when its cgroup is empty, or at the job's
    /// timeout or a lost lease, which kill them.
    Wait,
}

/// What a run executes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// Executed directly, no shell: `argv[0]` is looked up in `PATH`.
    Argv(Vec<String>),
    /// The explicit opt-in for a shell: `/bin/sh -c <script>`.
    Shell(String),
    /// A request sent at each attempt (`http = { … }`): the run is `ok`
    /// when the answer's status is one the job expects.
    Http(Box<HttpRequest>),
    /// An async function registered in the program that embeds cronlease
    /// ([`crate::embed`]); a job table on disk cannot say this.
    Handler,
}

/// What a tick does while a run of the same job is in flight.
///
/// A job's `overlap` ([`JobBuilder::overlap`](crate::JobBuilder::overlap)),
/// default `Skip`. "In flight" counts runs on every instance.
///
/// ```
/// use cronlease::{JobBuilder, Overlap};
///
/// let job = JobBuilder::new("export", "*/5 * * * *").overlap(Overlap::Replace);
/// assert_eq!(Overlap::Replace.to_string(), "replace");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Overlap {
    /// Do not start; record `skipped_overlap` for the tick.
    Skip,
    /// Start anyway; each run has its own lease and fence.
    Allow,
    /// Start the new run; the old one loses its lease and is stopped
    /// ([`Stop::LostLease`](crate::Stop::LostLease)).
    Replace,
}

/// What becomes of ticks that passed while no instance could claim them
/// (every instance down, or Redis away).
///
/// A job's `misfire` ([`JobBuilder::misfire`](crate::JobBuilder::misfire)),
/// default `RunOnce`. Only ticks younger than the job's `misfire_grace`
/// count; the missed ticks are recorded whatever the policy.
///
/// ```
/// use cronlease::{JobBuilder, Misfire};
///
/// let job = JobBuilder::new("invoice", "0 * * * *").misfire(Misfire::RunAll);
/// assert_eq!(Misfire::RunAll.as_str(), "run_all");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Misfire {
    /// Run only the latest missed tick.
    RunOnce,
    /// Run none of them.
    Skip,
    /// Run each missed tick, oldest first, one after another (at most the
    /// latest 100).
    RunAll,
}

/// What becomes of a run whose instance died before recording an outcome.
///
/// A job's `on_holder_lost`
/// ([`JobBuilder::on_holder_lost`](crate::JobBuilder::on_holder_lost)),
/// default `Record`. Another instance notices once the run's lease has
/// lapsed.
///
/// ```
/// use cronlease::{JobBuilder, OnHolderLost};
///
/// let job = JobBuilder::new("settle", "0 3 * * *").on_holder_lost(OnHolderLost::Rerun);
/// assert_eq!(OnHolderLost::Rerun.as_str(), "rerun");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum OnHolderLost {
    /// Record `abandoned` and nothing more (at most once).
    Record,
    /// Record `abandoned` and run the tick again with a new fence (at least
    /// once). Not available with `quorum`.
    Rerun,
}

enum_names!(Overlap { Skip => "skip", Allow => "allow", Replace => "replace" });
enum_names!(Misfire { RunOnce => "run_once", Skip => "skip", RunAll => "run_all" });
enum_names!(OnHolderLost { Record => "record", Rerun => "rerun" });

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
    let schedule = job.schedule.as_ref()?;
    if schedule.next_after(now).is_some() {
        return None;
    }
    if let Some(until) = schedule.window().until
        && until <= now
    {
        return Some(format!(
            "active_until {} has passed: the job will not run again; remove it or move active_until",
            until.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
        ));
    }
    let years = match schedule.last_year() {
        Some(year) => format!(" (its year field ends at {year})"),
        None => String::new(),
    };
    Some(format!(
        "schedule {:?} has no fire time after {}{years}: the job will not run again; \
         remove it or change its years",
        schedule.expression(),
        now.format("%Y-%m-%d %H:%M:%S UTC"),
    ))
}

#[cfg(test)]
mod tests;
