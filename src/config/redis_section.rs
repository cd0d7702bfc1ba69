//! `[redis]`: how to reach Redis (one server, Sentinel, Cluster or a
//! quorum of masters), TLS files, ACL credentials (read once, through
//! `environment`) and the `WAIT` gate, validated into [`RedisConfig`].

use std::ops::Range;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;

use super::checker::{Checker, redact_url};
use super::environment;
use super::{DEFAULT_ACK_TIMEOUT, DEFAULT_KEY_PREFIX, RedisConfig, Secret, Tls, Topology};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRedis {
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

/// The URL schemes a Redis endpoint may have, per topology.
pub(super) const TCP_SCHEMES: &[&str] = &["redis", "rediss"];
pub(super) const ALL_SCHEMES: &[&str] = &["redis", "rediss", "redis+unix", "unix"];

/// The section every problem here belongs to.
const S: &str = "redis";

/// `[redis]`: each step below checks one concern and records its own
/// problems; the section is valid only if every step is.
pub(super) fn validate_redis(checker: &mut Checker<'_>, raw: RawRedis) -> Option<RedisConfig> {
    let topology = redis_topology(checker, &raw);
    let endpoints = check_endpoints(checker, &raw);
    let username = raw.username.as_ref().map(|u| u.get_ref().clone());
    let password = redis_password(checker, &raw);
    let tls = redis_tls(checker, &raw, &endpoints);
    let timeouts = redis_timeouts(checker, &raw);
    let min_replicas_ack = min_replicas_ack(checker, &raw, &timeouts);
    let topology = topology.filter(|_| endpoints.valid);
    let key_prefix = key_prefix(checker, raw.key_prefix);
    Some(RedisConfig {
        topology: topology?,
        key_prefix,
        connect_timeout: timeouts.connect,
        command_timeout: timeouts.command,
        username,
        password: password.ok()?,
        password_env: raw.password_env.as_ref().map(|v| v.get_ref().clone()),
        tls: tls?,
        min_replicas_ack,
        ack_timeout: timeouts.ack,
    })
}

/// What [`check_endpoints`] found about the URLs of `[redis]`.
pub(super) struct Endpoints {
    /// Every URL parses with a scheme its field allows, and every list is
    /// long enough (and, for `quorum`, names each server once).
    valid: bool,
    /// Some URL is `rediss://`, which TLS settings need.
    any_tls: bool,
}

/// The URLs of `url`, `sentinels`, `cluster` and `quorum`: each one's
/// scheme, each list's length, and `quorum`'s servers each listed once.
pub(super) fn check_endpoints(checker: &mut Checker<'_>, raw: &RawRedis) -> Endpoints {
    let mut endpoints = Endpoints {
        valid: true,
        any_tls: false,
    };
    if let Some(url) = &raw.url {
        endpoints.valid &= check_url(checker, url.span(), "url", url.get_ref(), ALL_SCHEMES);
        endpoints.any_tls |= url.get_ref().starts_with("rediss://");
    }
    for (field, list, schemes, min) in [
        ("sentinels", &raw.sentinels, TCP_SCHEMES, 1),
        ("cluster", &raw.cluster, TCP_SCHEMES, 1),
        ("quorum", &raw.quorum, TCP_SCHEMES, 3),
    ] {
        let Some(list) = list else { continue };
        if list.get_ref().len() < min {
            endpoints.valid = false;
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
            endpoints.valid = false;
            checker.problem(
                Some(list.span()),
                Some(S),
                Some(field),
                "`quorum` names one server twice: expected independent masters, each listed once"
                    .into(),
            );
        }
        for url in list.get_ref() {
            endpoints.valid &= check_url(checker, list.span(), field, url, schemes);
            endpoints.any_tls |= url.starts_with("rediss://");
        }
    }
    endpoints
}

/// Whether `url` is a Redis URL with one of `schemes`; records a problem
/// (with the password redacted) when it is not.
fn check_url(
    checker: &mut Checker<'_>,
    span: Range<usize>,
    field: &str,
    url: &str,
    schemes: &[&str],
) -> bool {
    let ok = redis::parse_redis_url(url).is_some_and(|parsed| schemes.contains(&parsed.scheme()));
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
}

/// The three timeouts of `[redis]`, defaults where unset.
pub(super) struct Timeouts {
    connect: Duration,
    command: Duration,
    ack: Duration,
}

/// `connect_timeout`, `command_timeout` and `ack_timeout`, each on its own.
pub(super) fn redis_timeouts(checker: &mut Checker<'_>, raw: &RawRedis) -> Timeouts {
    let connect = checker.duration(
        S,
        "connect_timeout",
        raw.connect_timeout.as_ref(),
        Duration::from_secs(5),
        Duration::from_secs(300),
    );
    let command = checker.duration(
        S,
        "command_timeout",
        raw.command_timeout.as_ref(),
        Duration::from_secs(2),
        Duration::from_secs(300),
    );
    let ack = checker.duration(
        S,
        "ack_timeout",
        raw.ack_timeout.as_ref(),
        DEFAULT_ACK_TIMEOUT,
        Duration::from_secs(60),
    );
    Timeouts {
        connect,
        command,
        ack,
    }
}

/// The `WAIT` gate (durability): `min_replicas_ack` in 0..=64, not with
/// `quorum`, and with an `ack_timeout` shorter than `command_timeout`.
pub(super) fn min_replicas_ack(
    checker: &mut Checker<'_>,
    raw: &RawRedis,
    timeouts: &Timeouts,
) -> u32 {
    let Some(given) = &raw.min_replicas_ack else {
        return 0;
    };
    match u32::try_from(*given.get_ref()) {
        Ok(k) if k <= 64 => {
            if k > 0 && raw.quorum.is_some() {
                checker.problem(
                    Some(given.span()),
                    Some(S),
                    Some("min_replicas_ack"),
                    "min_replicas_ack does not apply to `quorum` (its masters have no replicas to wait for): expected 0 or no key; the quorum itself is the durability".into(),
                );
            }
            if k > 0 && timeouts.ack >= timeouts.command {
                checker.problem(
                    Some(raw.ack_timeout.as_ref().map_or(given.span(), Spanned::span)),
                    Some(S),
                    Some("ack_timeout"),
                    format!(
                        "ack_timeout {} must be shorter than command_timeout {}: the claim and its WAIT share one reply deadline",
                        humantime::format_duration(timeouts.ack),
                        humantime::format_duration(timeouts.command)
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
    }
}

/// `key_prefix`: 1 to 64 characters that cannot break a key's hash tag;
/// [`DEFAULT_KEY_PREFIX`] when unset.
pub(super) fn key_prefix(checker: &mut Checker<'_>, prefix: Option<Spanned<String>>) -> String {
    let Some(prefix) = prefix else {
        return DEFAULT_KEY_PREFIX.to_string();
    };
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

/// Which of `url`, `sentinels`, `cluster` and `quorum` is set: exactly one.
pub(super) fn redis_topology(checker: &mut Checker<'_>, raw: &RawRedis) -> Option<Topology> {
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
pub(super) fn has_duplicates(urls: &[String]) -> bool {
    let mut seen = std::collections::HashSet::new();
    !urls
        .iter()
        .all(|url| seen.insert(url.trim_end_matches('/')))
}

/// The password from `password_env` or `password_file` (at most one).
/// `Err` when one is given and cannot be read.
pub(super) fn redis_password(
    checker: &mut Checker<'_>,
    raw: &RawRedis,
) -> Result<Option<Secret>, ()> {
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
        (Some(var), None) => match environment::non_empty_var(var.get_ref()) {
            Some(value) => Ok(Some(Secret::new(value))),
            None => {
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
            match environment::read_password_file(file.get_ref()) {
                Ok(Some(password)) => Ok(Some(Secret::new(password))),
                Ok(None) => {
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
pub(super) fn redis_tls(
    checker: &mut Checker<'_>,
    raw: &RawRedis,
    endpoints: &Endpoints,
) -> Option<Tls> {
    let mut ok = true;
    let mut file = |checker: &mut Checker<'_>, field: &str, value: &Option<Spanned<String>>| {
        let value = value.as_ref()?;
        if let Err(e) = environment::check_readable(value.get_ref()) {
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
    if any_tls_setting && !endpoints.any_tls {
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
