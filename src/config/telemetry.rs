//! `[daemon.telemetry]`: where the daemon exports the spans of its runs
//! and claims (OTLP), validated into [`TelemetryConfig`]. Without the
//! table nothing is exported and the spans cost nothing.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;

use super::checker::Checker;

/// The section every problem here belongs to.
const S: &str = "daemon.telemetry";

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTelemetry {
    endpoint: Spanned<String>,
    protocol: Option<Spanned<String>>,
    #[serde(default)]
    headers: BTreeMap<String, Spanned<String>>,
    #[serde(default)]
    headers_env: BTreeMap<String, Spanned<String>>,
    headers_file: Option<Spanned<String>>,
    sampling: Option<Spanned<f64>>,
    service_name: Option<Spanned<String>>,
    timeout: Option<Spanned<String>>,
}

/// The OTLP transport (`protocol`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OtlpProtocol {
    /// `grpc`: OTLP over gRPC (the collector's port 4317).
    Grpc,
    /// `http/protobuf` (the default, as the OTLP specification's): binary
    /// protobuf over HTTP (port 4318, path `/v1/traces`).
    HttpProtobuf,
    /// `http/json`: JSON over HTTP (port 4318, path `/v1/traces`).
    HttpJson,
}

impl OtlpProtocol {
    /// As the config writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            OtlpProtocol::Grpc => "grpc",
            OtlpProtocol::HttpProtobuf => "http/protobuf",
            OtlpProtocol::HttpJson => "http/json",
        }
    }
}

/// Where a header's value comes from: the config itself, or (for secrets,
/// which should not sit in the file) the environment or a file.
#[derive(Debug, Clone, PartialEq)]
pub enum HeaderSource {
    /// `headers`: the value as written.
    Value(String),
    /// `headers_env`: the value of this environment variable, read when
    /// the exporter starts.
    Env(String),
}

/// `[daemon.telemetry]`, validated.
#[derive(Debug, Clone, PartialEq)]
pub struct TelemetryConfig {
    /// The collector's URL (`http://` or `https://`). For the HTTP
    /// protocols `/v1/traces` is added unless the path ends with it.
    pub endpoint: String,
    pub protocol: OtlpProtocol,
    /// Each request's headers by name (lowercase), from `headers` and
    /// `headers_env`.
    pub headers: BTreeMap<String, HeaderSource>,
    /// `headers_file`: more headers, one `name: value` a line, read when
    /// the exporter starts.
    pub headers_file: Option<PathBuf>,
    /// The share of traces recorded, 0 to 1, for runs that do not continue
    /// a trace; a run that does follows its parent's sampled flag.
    pub sampling: f64,
    /// The `service.name` of the spans' resource.
    pub service_name: String,
    /// How long one export may take.
    pub timeout: Duration,
}

impl TelemetryConfig {
    /// The environment variables that hold secrets (`headers_env`): no
    /// run inherits them.
    pub fn secret_env_names(&self) -> impl Iterator<Item = &str> {
        self.headers.values().filter_map(|h| match h {
            HeaderSource::Env(name) => Some(name.as_str()),
            HeaderSource::Value(_) => None,
        })
    }
}

/// `[daemon.telemetry]`, each key checked on its own.
pub(super) fn telemetry(checker: &mut Checker<'_>, raw: RawTelemetry) -> Option<TelemetryConfig> {
    let endpoint = endpoint(checker, &raw.endpoint);
    let protocol = protocol(checker, raw.protocol.as_ref());
    let headers = headers(checker, raw.headers, raw.headers_env);
    let headers_file = raw.headers_file.and_then(|path| {
        if path.get_ref().trim().is_empty() {
            checker.problem(
                Some(path.span()),
                Some(S),
                Some("headers_file"),
                "empty path: expected a file such as \"/etc/cronlease/otlp-headers\"".into(),
            );
            return None;
        }
        Some(PathBuf::from(path.into_inner()))
    });
    let sampling = match raw.sampling {
        None => 1.0,
        Some(ratio) if (0.0..=1.0).contains(ratio.get_ref()) => *ratio.get_ref(),
        Some(ratio) => {
            checker.problem(
                Some(ratio.span()),
                Some(S),
                Some("sampling"),
                format!(
                    "{} is out of range: expected a ratio from 0.0 to 1.0",
                    ratio.get_ref()
                ),
            );
            1.0
        }
    };
    let service_name = service_name(checker, raw.service_name);
    let timeout = checker.duration(
        S,
        "timeout",
        raw.timeout.as_ref(),
        Duration::from_secs(10),
        Duration::from_secs(300),
    );
    Some(TelemetryConfig {
        endpoint: endpoint?,
        protocol,
        headers,
        headers_file,
        sampling,
        service_name,
        timeout,
    })
}

fn endpoint(checker: &mut Checker<'_>, given: &Spanned<String>) -> Option<String> {
    let url = given.get_ref().trim();
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"));
    let host = rest.map(|r| r.split(['/', '?', '#']).next().unwrap_or(""));
    match host {
        Some(host) if !host.is_empty() && !url.chars().any(char::is_whitespace) => {
            Some(url.to_string())
        }
        _ => {
            checker.problem(
                Some(given.span()),
                Some(S),
                Some("endpoint"),
                format!(
                    "invalid endpoint {url:?}: expected an http:// or https:// URL with a host, such as \"http://127.0.0.1:4318\""
                ),
            );
            None
        }
    }
}

fn protocol(checker: &mut Checker<'_>, given: Option<&Spanned<String>>) -> OtlpProtocol {
    let Some(given) = given else {
        return OtlpProtocol::HttpProtobuf;
    };
    match given.get_ref().as_str() {
        "grpc" => OtlpProtocol::Grpc,
        "http/protobuf" => OtlpProtocol::HttpProtobuf,
        "http/json" => OtlpProtocol::HttpJson,
        other => {
            checker.problem(
                Some(given.span()),
                Some(S),
                Some("protocol"),
                format!(
                    "unknown protocol {other:?}: expected \"grpc\", \"http/protobuf\" or \"http/json\""
                ),
            );
            OtlpProtocol::HttpProtobuf
        }
    }
}

/// Whether `name` is an HTTP header name (an RFC 9110 token).
pub(crate) fn is_header_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

fn headers(
    checker: &mut Checker<'_>,
    values: BTreeMap<String, Spanned<String>>,
    env: BTreeMap<String, Spanned<String>>,
) -> BTreeMap<String, HeaderSource> {
    let mut headers = BTreeMap::new();
    let values = values.into_iter().map(|(n, v)| ("headers", n, v));
    let env = env.into_iter().map(|(n, v)| ("headers_env", n, v));
    for (field, name, value) in values.chain(env) {
        let problem = if !is_header_name(&name) {
            Some(format!(
                "invalid header name {name:?}: expected letters, digits and -, such as \"x-api-key\""
            ))
        } else if headers.contains_key(&name.to_ascii_lowercase()) {
            Some(format!(
                "header {name:?} is given twice (headers and headers_env): expected it once"
            ))
        } else if field == "headers" && value.get_ref().chars().any(char::is_control) {
            Some(format!("header {name:?}: a control character in its value"))
        } else if field == "headers_env" && !super::is_env_name(value.get_ref()) {
            Some(format!(
                "header {name:?}: invalid environment variable name {:?}: expected letters, digits and _ not starting with a digit",
                value.get_ref()
            ))
        } else {
            None
        };
        if let Some(message) = problem {
            checker.problem(Some(value.span()), Some(S), Some(field), message);
            continue;
        }
        let source = match field {
            "headers" => HeaderSource::Value(value.into_inner()),
            _ => HeaderSource::Env(value.into_inner()),
        };
        headers.insert(name.to_ascii_lowercase(), source);
    }
    headers
}

fn service_name(checker: &mut Checker<'_>, given: Option<Spanned<String>>) -> String {
    const DEFAULT: &str = "cronlease";
    let Some(given) = given else {
        return DEFAULT.to_string();
    };
    let name = given.get_ref();
    if name.trim().is_empty() || name.len() > 255 || name.chars().any(char::is_control) {
        checker.problem(
            Some(given.span()),
            Some(S),
            Some("service_name"),
            format!(
                "invalid service_name {name:?}: expected 1 to 255 characters without control characters, such as \"cronlease\""
            ),
        );
        return DEFAULT.to_string();
    }
    given.into_inner()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use std::path::Path;

    fn parse(telemetry: &str) -> Result<Config, crate::config::ConfigError> {
        let text = format!(
            "[redis]\nurl = \"redis://127.0.0.1:7000/0\"\n[daemon]\nlease = \"30s\"\n[daemon.telemetry]\n{telemetry}\n[jobs.a]\nschedule = \"@daily\"\ncommand = [\"true\"]\n"
        );
        Config::parse(&text, Path::new("/etc/cronlease/jobs.toml"))
    }

    #[test]
    fn defaults_and_every_key() {
        let config = parse("endpoint = \"http://collector:4318\"").expect("valid");
        let telemetry = config.daemon.telemetry.expect("the table is set");
        assert_eq!(telemetry.protocol, OtlpProtocol::HttpProtobuf);
        assert_eq!(telemetry.sampling, 1.0);
        assert_eq!(telemetry.service_name, "cronlease");
        assert_eq!(telemetry.timeout, Duration::from_secs(10));
        let config = parse(
            "endpoint = \"https://collector:4317\"\nprotocol = \"grpc\"\nheaders = { X-Team = \"ops\" }\nheaders_env = { x-api-key = \"OTLP_KEY\" }\nheaders_file = \"/etc/cronlease/otlp-headers\"\nsampling = 0.25\nservice_name = \"billing-cron\"\ntimeout = \"3s\"",
        )
        .expect("valid");
        let telemetry = config.daemon.telemetry.clone().expect("the table is set");
        assert_eq!(telemetry.protocol, OtlpProtocol::Grpc);
        assert_eq!(telemetry.sampling, 0.25);
        assert_eq!(telemetry.service_name, "billing-cron");
        assert_eq!(telemetry.timeout, Duration::from_secs(3));
        assert_eq!(
            telemetry.headers_file.as_deref(),
            Some(Path::new("/etc/cronlease/otlp-headers"))
        );
        assert_eq!(
            telemetry.headers.get("x-team"),
            Some(&HeaderSource::Value("ops".into()))
        );
        assert_eq!(
            telemetry.headers.get("x-api-key"),
            Some(&HeaderSource::Env("OTLP_KEY".into()))
        );
        // The key's variable is a secret: no run inherits it.
        assert!(config.secret_env_names().contains(&"OTLP_KEY".to_string()));
    }

    #[test]
    fn each_bad_key_is_named_with_its_line() {
        let check = |telemetry: &str, field: &str, fragment: &str| {
            let error = parse(telemetry).expect_err(telemetry).to_string();
            assert!(
                error.contains(&format!("[daemon.telemetry], field `{field}`"))
                    && error.contains(fragment),
                "{telemetry}: {error}"
            );
            let line = 6 + telemetry
                .lines()
                .position(|l| l.starts_with(field))
                .expect("the key is in the table");
            assert!(
                error.contains(&format!("jobs.toml:{line}:")),
                "{telemetry}: {error}"
            );
        };
        check(
            "endpoint = \"collector:4318\"",
            "endpoint",
            "http:// or https://",
        );
        check(
            "endpoint = \"http://c\"\nprotocol = \"http\"",
            "protocol",
            "\"grpc\", \"http/protobuf\" or \"http/json\"",
        );
        check(
            "endpoint = \"http://c\"\nsampling = 1.5",
            "sampling",
            "0.0 to 1.0",
        );
        check(
            "endpoint = \"http://c\"\ntimeout = \"soon\"",
            "timeout",
            "invalid duration",
        );
        check(
            "endpoint = \"http://c\"\nheaders = { \"bad name\" = \"x\" }",
            "headers",
            "invalid header name",
        );
        check(
            "endpoint = \"http://c\"\nheaders_env = { x-key = \"1KEY\" }",
            "headers_env",
            "invalid environment variable name",
        );
        check(
            "endpoint = \"http://c\"\nheaders = { x-key = \"a\" }\nheaders_env = { X-Key = \"KEY\" }",
            "headers_env",
            "given twice",
        );
        check(
            "endpoint = \"http://c\"\nservice_name = \"\"",
            "service_name",
            "1 to 255",
        );
        let error = parse("endpoint = \"http://c\"\nsampler = 0.5")
            .expect_err("an unknown key")
            .to_string();
        assert!(
            error.contains("jobs.toml:7:") && error.contains("unknown field `sampler`"),
            "{error}"
        );
        let error = parse("protocol = \"grpc\"")
            .expect_err("no endpoint")
            .to_string();
        assert!(error.contains("endpoint"), "{error}");
    }
}
