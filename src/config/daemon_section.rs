//! `[daemon]`: leases, graces, the replica's identity and state directory,
//! history, heartbeats, logging and metrics, validated into [`DaemonConfig`].

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;
use toml::de::DeValue;

use super::checker::{Checker, Given, is_name};
use super::environment;
use super::notify_rules::{RawDaemonRules, daemon_rules};
use super::{
    ChannelSpec, ContainmentSetting, DEFAULT_DASHBOARD_LISTEN, DEFAULT_HTTP_MAX_CONNECTIONS,
    DEFAULT_METRICS_LISTEN, DEFAULT_STATE_DIR, DaemonConfig, DashboardRead, LogFormat, RedisConfig,
    TokenSource,
};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawDaemon {
    lease: Option<Spanned<String>>,
    shutdown_grace: Option<Spanned<String>>,
    kill_grace: Option<Spanned<String>>,
    replica_id: Option<Spanned<String>>,
    state_dir: Option<Spanned<String>>,
    history: Option<Spanned<i64>>,
    max_runs: Option<Spanned<i64>>,
    output_tail_bytes: Option<Spanned<i64>>,
    live_output_lines: Option<Spanned<i64>>,
    spool_max_bytes: Option<Spanned<i64>>,
    heartbeat: Option<Spanned<String>>,
    log_format: Option<LogFormat>,
    metrics_listen: Option<Spanned<String>>,
    dashboard_listen: Option<Spanned<String>>,
    containment: Option<ContainmentSetting>,
    dashboard_token_env: Option<Spanned<String>>,
    dashboard_token_file: Option<Spanned<String>>,
    inherit_env: Option<Given<Vec<Given<String>>>>,
    dashboard_read: Option<Spanned<String>>,
    dashboard_hosts: Option<Vec<Spanned<String>>>,
    http_max_connections: Option<Spanned<i64>>,
    notify: Option<Given<Vec<Given<String>>>>,
    notify_on: Option<Given<Vec<Given<String>>>>,
    late_after: Option<Spanned<String>>,
    repeat_every: Option<Spanned<String>>,
    retry_for: Option<Spanned<String>>,
    dashboard_url: Option<Spanned<String>>,
    tags: Option<Given<Vec<Given<String>>>>,
    /// `[daemon.telemetry]`, read on its own ([`read_daemon`]) so that its
    /// problems name it and do not hide the rest of `[daemon]`'s.
    #[serde(skip)]
    telemetry: Option<super::telemetry::RawTelemetry>,
}

/// `[daemon]` and its `[daemon.telemetry]` table, each deserialized on its
/// own (each bad key a problem of its own table).
pub(super) fn read_daemon(
    checker: &mut Checker<'_>,
    value: &Spanned<DeValue<'_>>,
) -> Option<RawDaemon> {
    let DeValue::Table(table) = value.get_ref() else {
        return checker.deserialize_table::<RawDaemon>(S, value);
    };
    let (telemetry, rest): (Vec<_>, Vec<_>) = table
        .clone()
        .into_iter()
        .partition(|(key, _)| key.get_ref() == "telemetry");
    let rest = Spanned::new(value.span(), DeValue::Table(rest.into_iter().collect()));
    let telemetry = telemetry.into_iter().next().and_then(|(_, table)| {
        checker.deserialize_table::<super::telemetry::RawTelemetry>("daemon.telemetry", &table)
    });
    let mut raw = checker.deserialize_table::<RawDaemon>(S, &rest)?;
    raw.telemetry = telemetry;
    Some(raw)
}

impl RawDaemon {
    pub(super) fn default_raw() -> RawDaemon {
        RawDaemon {
            lease: None,
            shutdown_grace: None,
            kill_grace: None,
            replica_id: None,
            state_dir: None,
            history: None,
            max_runs: None,
            output_tail_bytes: None,
            live_output_lines: None,
            spool_max_bytes: None,
            heartbeat: None,
            log_format: None,
            metrics_listen: None,
            dashboard_listen: None,
            containment: None,
            dashboard_token_env: None,
            dashboard_token_file: None,
            inherit_env: None,
            dashboard_read: None,
            dashboard_hosts: None,
            http_max_connections: None,
            notify: None,
            notify_on: None,
            late_after: None,
            repeat_every: None,
            retry_for: None,
            dashboard_url: None,
            tags: None,
            telemetry: None,
        }
    }
}

pub(crate) const MAX_LEASE: Duration = Duration::from_secs(3600);
pub(crate) const MIN_LEASE: Duration = Duration::from_secs(1);
pub(super) const MAX_GRACE: Duration = Duration::from_secs(3600);

/// The section every problem here belongs to.
const S: &str = "daemon";

// Long by design: each setting validated in turn, then the struct it fills,
// field by field.
/// `[daemon]`: each setting on its own (the lease also against `[redis]`
/// `command_timeout`, the notification rules against the channels
/// declared, valid or not; the valid ones' secret variables are no run's),
/// defaults where unset.
pub(super) fn validate_daemon(
    checker: &mut Checker<'_>,
    raw: RawDaemon,
    redis: &Option<RedisConfig>,
    (channels, declared): (&BTreeMap<String, ChannelSpec>, &[String]),
    named: NamedTokens,
) -> Option<DaemonConfig> {
    let lease = daemon_lease(checker, raw.lease.as_ref(), redis);
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
    let replica_id = replica_id(checker, raw.replica_id);
    let state_dir = state_dir(checker, raw.state_dir);
    let metrics_listen = listen(
        checker,
        "metrics_listen",
        raw.metrics_listen,
        DEFAULT_METRICS_LISTEN,
    );
    let dashboard_listen = listen(
        checker,
        "dashboard_listen",
        raw.dashboard_listen,
        DEFAULT_DASHBOARD_LISTEN,
    );
    let dashboard_token =
        dashboard_token(checker, raw.dashboard_token_env, raw.dashboard_token_file);
    let dashboard_read =
        dashboard_read(checker, raw.dashboard_read, dashboard_token.as_ref(), named);
    let dashboard_hosts = dashboard_hosts(checker, raw.dashboard_hosts.unwrap_or_default());
    let http_max_connections = checker.integer(
        S,
        "http_max_connections",
        raw.http_max_connections.as_ref(),
        i64::try_from(DEFAULT_HTTP_MAX_CONNECTIONS).expect("the default is a small number"),
        1..65_537,
    );
    let history = checker.integer(S, "history", raw.history.as_ref(), 1000, 1..1_000_001);
    let max_runs = raw.max_runs.as_ref().map(|n| {
        let n = checker.integer(S, "max_runs", Some(n), 1, 1..1_000_001);
        u32::try_from(n).expect("max_runs was checked to be within 1..=1_000_000")
    });
    let output_tail_bytes = checker.integer(
        S,
        "output_tail_bytes",
        raw.output_tail_bytes.as_ref(),
        4096,
        0..1_048_577,
    );
    let live_output_lines = checker.integer(
        S,
        "live_output_lines",
        raw.live_output_lines.as_ref(),
        1000,
        0..100_001,
    );
    let mut secrets = super::secret_env_names(
        redis.as_ref().and_then(|r| r.password_env.as_deref()),
        dashboard_token.as_ref(),
    );
    secrets.extend(
        channels
            .values()
            .filter_map(|c| c.secret_env().map(str::to_string)),
    );
    let telemetry = raw
        .telemetry
        .and_then(|t| super::telemetry::telemetry(checker, t));
    secrets.extend(
        telemetry
            .iter()
            .flat_map(|t| t.secret_env_names().map(str::to_string)),
    );
    let rules = RawDaemonRules {
        notify: raw.notify.as_ref(),
        notify_on: raw.notify_on.as_ref(),
        late_after: raw.late_after.as_ref(),
        repeat_every: raw.repeat_every.as_ref(),
        retry_for: raw.retry_for.as_ref(),
        dashboard_url: raw.dashboard_url.as_ref(),
    };
    let notify = daemon_rules(checker, rules, declared);
    let inherit_env = super::run_env::inherit_env(checker, S, raw.inherit_env, &secrets);
    let spool_max_bytes = spool_max_bytes(checker, raw.spool_max_bytes.as_ref());
    let tags = super::placement::tag_list(checker, S, "tags", raw.tags);
    Some(DaemonConfig {
        lease,
        shutdown_grace,
        kill_grace,
        replica_id,
        state_dir,
        history: u32::try_from(history).expect("history was checked to be within 1..=1_000_000"),
        max_runs,
        output_tail_bytes: usize::try_from(output_tail_bytes)
            .expect("output_tail_bytes was checked to be within 0..=1 MiB"),
        live_output_lines: usize::try_from(live_output_lines)
            .expect("live_output_lines was checked to be within 0..=100000"),
        spool_max_bytes,
        heartbeat,
        log_format: raw.log_format.unwrap_or(LogFormat::Text),
        metrics_listen,
        dashboard_listen,
        dashboard_token,
        dashboard_read,
        dashboard_hosts,
        http_max_connections: usize::try_from(http_max_connections)
            .expect("http_max_connections was checked to be within 1..=65536"),
        containment: raw.containment.unwrap_or_default(),
        inherit_env,
        notify,
        tags,
        telemetry,
    })
}

/// Whether a lease renewed every third of it can be kept: each renewal
/// must outlast one Redis command timeout. A replica's `lease` and a
/// library lock's are held to it.
pub(crate) fn renewable(lease: Duration, command_timeout: Duration) -> bool {
    lease / 3 > command_timeout
}

/// `lease`: at least [`MIN_LEASE`], and long enough that its renewal period
/// (lease / 3) outlasts `[redis] command_timeout`.
fn daemon_lease(
    checker: &mut Checker<'_>,
    given: Option<&Spanned<String>>,
    redis: &Option<RedisConfig>,
) -> Duration {
    let lease = checker.duration(S, "lease", given, Duration::from_secs(30), MAX_LEASE);
    let Some(span) = given.map(Spanned::span) else {
        return lease;
    };
    if lease < MIN_LEASE {
        checker.problem(
            Some(span),
            Some(S),
            Some("lease"),
            format!(
                "lease {} is too short: the watchdog renews every lease/3 and needs room for a Redis round trip and a retry; expected at least 1s",
                humantime::format_duration(lease)
            ),
        );
    } else if let Some(redis) = redis
        && !renewable(lease, redis.command_timeout)
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
    lease
}

/// The least `spool_max_bytes`: one outcome with a short output tail.
const MIN_SPOOL_BYTES: u64 = 4096;

/// The most `spool_max_bytes`: 1 TiB.
const MAX_SPOOL_BYTES: u64 = 1 << 40;

/// `spool_max_bytes`: bytes, from [`MIN_SPOOL_BYTES`] to
/// [`MAX_SPOOL_BYTES`]; [`crate::spool::DEFAULT_MAX_BYTES`] when unset.
fn spool_max_bytes(checker: &mut Checker<'_>, given: Option<&Spanned<i64>>) -> u64 {
    let default = crate::spool::DEFAULT_MAX_BYTES;
    let Some(given) = given else { return default };
    match u64::try_from(*given.get_ref()) {
        Ok(bytes) if (MIN_SPOOL_BYTES..=MAX_SPOOL_BYTES).contains(&bytes) => bytes,
        _ => {
            checker.problem(
                Some(given.span()),
                Some(S),
                Some("spool_max_bytes"),
                format!(
                    "{} is out of range: expected a number of bytes from {MIN_SPOOL_BYTES} (4 KiB) to {MAX_SPOOL_BYTES} (1 TiB), such as {default} (256 MiB, the default)",
                    given.get_ref()
                ),
            );
            default
        }
    }
}

/// `replica_id`: a name like a job's; `None` lets the daemon make one.
fn replica_id(checker: &mut Checker<'_>, given: Option<Spanned<String>>) -> Option<String> {
    given.map(|id| {
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
    })
}

/// `state_dir`: not empty; when unset, systemd's `StateDirectory=`, else
/// [`DEFAULT_STATE_DIR`].
fn state_dir(checker: &mut Checker<'_>, given: Option<Spanned<String>>) -> PathBuf {
    match given {
        None => environment::systemd_state_directory()
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
    }
}

/// `metrics_listen` or `dashboard_listen`: an IP:port, `""` for off, and
/// `default` when unset.
fn listen(
    checker: &mut Checker<'_>,
    field: &'static str,
    given: Option<Spanned<String>>,
    default: &str,
) -> Option<SocketAddr> {
    match given {
        None => Some(
            default
                .parse()
                .expect("the default listen addresses are valid socket addresses"),
        ),
        Some(text) if text.get_ref().is_empty() => None,
        Some(text) => match text.get_ref().parse() {
            Ok(addr) => Some(addr),
            Err(_) => {
                checker.problem(
                    Some(text.span()),
                    Some(S),
                    Some(field),
                    format!(
                        "invalid address {:?}: expected IP:port such as \"{default}\", or \"\" to turn it off",
                        text.get_ref()
                    ),
                );
                None
            }
        },
    }
}

/// `dashboard_token_env` (a variable name) or `dashboard_token_file` (a
/// path), at most one of them. The token is read when the daemon starts,
/// not here: `status` and `check` never need it.
fn dashboard_token(
    checker: &mut Checker<'_>,
    env: Option<Spanned<String>>,
    file: Option<Spanned<String>>,
) -> Option<TokenSource> {
    match (env, file) {
        (None, None) => None,
        (Some(_), Some(file)) => {
            checker.problem(
                Some(file.span()),
                Some(S),
                Some("dashboard_token_file"),
                "both dashboard_token_env and dashboard_token_file are set: expected one of them"
                    .into(),
            );
            None
        }
        (Some(name), None) => {
            if !super::is_env_name(name.get_ref()) {
                checker.problem(
                    Some(name.span()),
                    Some(S),
                    Some("dashboard_token_env"),
                    format!(
                        "invalid environment variable name {:?}: expected letters, digits and _ not starting with a digit, such as \"CRONLEASE_DASHBOARD_TOKEN\"",
                        name.get_ref()
                    ),
                );
                return None;
            }
            Some(TokenSource::Env(name.into_inner()))
        }
        (None, Some(path)) => {
            if path.get_ref().trim().is_empty() {
                checker.problem(
                    Some(path.span()),
                    Some(S),
                    Some("dashboard_token_file"),
                    "empty path: expected a file such as \"/etc/cronlease/dashboard.token\"".into(),
                );
                return None;
            }
            Some(TokenSource::File(PathBuf::from(path.into_inner())))
        }
    }
}

/// Whether `[[dashboard.tokens]]` gives tokens to log in with besides
/// `dashboard_token_*`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum NamedTokens {
    None,
    Some,
}

/// `dashboard_read`: `"token"` (the default) or `"public"`; `"token"`
/// written out without a token to log in with is a problem (nobody could
/// read the pages).
fn dashboard_read(
    checker: &mut Checker<'_>,
    given: Option<Spanned<String>>,
    token: Option<&TokenSource>,
    named: NamedTokens,
) -> DashboardRead {
    let Some(given) = given else {
        return DashboardRead::default();
    };
    let valid = DashboardRead::NAMES
        .map(|n| format!("\"{n}\""))
        .join(" or ");
    match DashboardRead::parse(given.get_ref()) {
        None => {
            checker.problem(
                Some(given.span()),
                Some(S),
                Some("dashboard_read"),
                format!(
                    "invalid value {:?}: expected {valid} (\"token\": reading the pages needs the login; \"public\": anyone who reaches the dashboard may read it)",
                    given.get_ref()
                ),
            );
            DashboardRead::default()
        }
        Some(DashboardRead::Token) if token.is_none() && named == NamedTokens::None => {
            checker.problem(
                Some(given.span()),
                Some(S),
                Some("dashboard_read"),
                "\"token\" needs a token to log in with: set dashboard_token_env or dashboard_token_file, or give [[dashboard.tokens]], or leave dashboard_read out (without a token the dashboard is read-only and public)".into(),
            );
            DashboardRead::Token
        }
        Some(read) => read,
    }
}

/// `dashboard_hosts`: host names (or addresses) the HTTP servers answer
/// to, each a DNS name or an IP address; lowercased.
fn dashboard_hosts(checker: &mut Checker<'_>, given: Vec<Spanned<String>>) -> Vec<String> {
    let mut hosts = Vec::with_capacity(given.len());
    for host in given {
        let text = host.get_ref().trim_end_matches('.');
        let address = text
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<std::net::IpAddr>()
            .is_ok();
        let name = !text.is_empty()
            && text.len() <= 253
            && text.split('.').all(|label| {
                !label.is_empty()
                    && label.len() <= 63
                    && !label.starts_with('-')
                    && !label.ends_with('-')
                    && label
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'-')
            });
        if address || name {
            hosts.push(text.to_ascii_lowercase());
        } else {
            checker.problem(
                Some(host.span()),
                Some(S),
                Some("dashboard_hosts"),
                format!(
                    "invalid host name {:?}: expected a DNS name such as \"cron.example.com\" or an IP address, without a port or scheme",
                    host.get_ref()
                ),
            );
        }
    }
    hosts
}
