//! A job's `http = { … }`: the request an HTTP job sends at each attempt
//! instead of running a command, validated into [`HttpRequest`]. Only
//! http and https URLs; the headers cronlease sets itself (the run's
//! identity, `Idempotency-Key`, `User-Agent`) and those of the connection
//! may not be given.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use super::checker::{Checker, DurationValue, Given, Secrets, header_problem};
use super::environment::{MAX_PEM_FILE, read_bounded};
use super::notify_rules::http_url_problem;

/// The most a request may take, `http.timeout`'s upper bound.
const MAX_REQUEST_TIMEOUT: Duration = Duration::from_secs(24 * 3600);

/// `http.timeout` when unset.
const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// The headers every request of an HTTP job carries, which cronlease
/// sets: a job may not give them (lowercase).
const HTTP_JOB_HEADERS: [&str; 6] = [
    "cronlease-job",
    "cronlease-tick",
    "cronlease-fence",
    "cronlease-run-id",
    "idempotency-key",
    "user-agent",
];

/// Why a job may not give one of [`HTTP_JOB_HEADERS`].
const HTTP_JOB_HEADERS_WHY: &str = "on every request of an HTTP job: expected another header (cronlease sends Cronlease-Job, Cronlease-Tick, Cronlease-Fence, Cronlease-Run-Id, Idempotency-Key and User-Agent)";

/// The methods a job may use.
const METHODS: [&str; 7] = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"];

/// `http = { … }` as written.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawHttp {
    method: Option<Given<String>>,
    url: Option<Given<String>>,
    #[serde(default)]
    headers: std::collections::BTreeMap<Given<String>, Given<String>>,
    body: Option<Given<String>>,
    expect: Option<Given<toml::Value>>,
    timeout: Option<Given<DurationValue>>,
    follow_redirects: Option<Given<bool>>,
    ca_file: Option<Given<String>>,
}

/// The request of an HTTP job, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpRequest {
    /// Upper case: one of GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS.
    pub method: String,
    /// An http:// or https:// URL with a host.
    pub url: String,
    /// The job's own headers, in the order of their names; none is one
    /// cronlease or the connection sets.
    pub headers: Vec<(String, String)>,
    pub body: Option<String>,
    /// The statuses that make the run `ok`; never empty.
    pub expect: Vec<StatusMatch>,
    /// The limit of one request (connecting, sending, reading the
    /// answer); the job's `timeout` still bounds the attempt.
    pub timeout: Duration,
    pub redirects: Redirects,
    /// A PEM file of CA certificates trusted besides the system's roots;
    /// absolute.
    pub ca_file: Option<PathBuf>,
}

/// One entry of `expect`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatusMatch {
    /// One status, such as 304.
    Code(u16),
    /// A class, such as 2 for "2xx".
    Class(u16),
}

impl StatusMatch {
    /// Whether `status` is one this entry accepts.
    pub fn matches(self, status: u16) -> bool {
        match self {
            StatusMatch::Code(code) => code == status,
            StatusMatch::Class(class) => status / 100 == class,
        }
    }
}

/// Whether a redirect answer is followed (`follow_redirects`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Redirects {
    /// The redirect is the answer: its status is matched against `expect`.
    Keep,
    /// Followed, up to 10 times; the final answer is matched.
    Follow,
}

/// `http`, every key checked; `None` when any is wrong (each problem is
/// recorded under the field `http.<key>`).
pub(super) fn job_http(
    checker: &mut Checker<'_>,
    section: &str,
    raw: RawHttp,
    base_dir: &Path,
) -> Option<HttpRequest> {
    let before = checker.problems.len();
    let read_files = checker.secrets == Secrets::Read;
    let mut problem = |at, key: &str, message: String| {
        checker.problem(at, Some(section), Some(&format!("http.{key}")), message);
    };
    let (method, url) = method_and_url(&mut problem, &raw);
    let mut headers = Vec::new();
    for (name, value) in raw.headers {
        match header_problem(
            name.get(),
            value.get(),
            &HTTP_JOB_HEADERS,
            HTTP_JOB_HEADERS_WHY,
        ) {
            Some(message) => problem(name.at(), "headers", message),
            None => headers.push((name.into_inner(), value.into_inner())),
        }
    }
    let expect = match &raw.expect {
        None => vec![StatusMatch::Class(2)],
        Some(given) => expect(given.get()).unwrap_or_else(|message| {
            problem(given.at(), "expect", message);
            Vec::new()
        }),
    };
    let ca_file = raw.ca_file.as_ref().map(|file| {
        let path = base_dir.join(file.get());
        let unusable = if file.get().trim().is_empty() {
            Some("empty path".to_string())
        } else if read_files {
            pem_problem(&path)
        } else {
            None
        };
        if let Some(what) = unusable {
            problem(file.at(), "ca_file", format!("{what}: expected a PEM file of CA certificates, absolute or relative to the config file"));
        }
        path
    });
    let body = raw.body.map(Given::into_inner);
    let redirects = match raw.follow_redirects.map(Given::into_inner) {
        Some(true) => Redirects::Follow,
        Some(false) | None => Redirects::Keep,
    };
    let timeout = checker.duration_value(
        section,
        "http.timeout",
        raw.timeout.as_ref(),
        DEFAULT_REQUEST_TIMEOUT,
        MAX_REQUEST_TIMEOUT,
    );
    (checker.problems.len() == before).then_some(HttpRequest {
        method,
        url,
        headers,
        body,
        expect,
        timeout,
        redirects,
        ca_file,
    })
}

/// `method` (GET when unset) and `url` (required, http or https), as
/// checked; what is wrong goes to `problem` (the key, the message).
fn method_and_url(
    problem: &mut impl FnMut(Option<std::ops::Range<usize>>, &str, String),
    raw: &RawHttp,
) -> (String, String) {
    let method = match &raw.method {
        None => "GET".to_string(),
        Some(m) => {
            let upper = m.get().to_ascii_uppercase();
            if !METHODS.contains(&upper.as_str()) {
                problem(
                    m.at(),
                    "method",
                    format!(
                        "invalid method {:?}: expected one of {}",
                        m.get(),
                        METHODS.join(", ")
                    ),
                );
            }
            upper
        }
    };
    let url = match &raw.url {
        None => {
            problem(
                None,
                "url",
                "missing `url`: expected an http:// or https:// URL".into(),
            );
            String::new()
        }
        Some(url) => {
            if let Some(message) = http_url_problem(url.get()) {
                problem(url.at(), "url", message);
            }
            url.get().clone()
        }
    };
    (method, url)
}

/// What makes the file at `path` no PEM file of certificates, if
/// anything: read now, so that `check` finds it, and again by the
/// replica's client when it is built.
fn pem_problem(path: &Path) -> Option<String> {
    match read_bounded(path, MAX_PEM_FILE) {
        Err(e) => Some(format!("cannot read {}: {e}", path.display())),
        Ok(bytes)
            if !bytes
                .windows(27)
                .any(|w| w == b"-----BEGIN CERTIFICATE-----") =>
        {
            Some(format!("no PEM certificate in {}", path.display()))
        }
        Ok(_) => None,
    }
}

/// `expect`: "2xx", 304, or a list of them (not empty).
fn expect(value: &toml::Value) -> Result<Vec<StatusMatch>, String> {
    let one = |item: &toml::Value| match item {
        toml::Value::Integer(code) => u16::try_from(*code)
            .ok()
            .filter(|c| (100..=599).contains(c))
            .map(StatusMatch::Code),
        toml::Value::String(text) => {
            let text = text.trim().to_ascii_lowercase();
            match text.as_bytes() {
                [class @ b'1'..=b'5', b'x', b'x'] => {
                    Some(StatusMatch::Class(u16::from(class - b'0')))
                }
                _ => text
                    .parse::<u16>()
                    .ok()
                    .filter(|c| (100..=599).contains(c))
                    .map(StatusMatch::Code),
            }
        }
        _ => None,
    };
    let items = match value {
        toml::Value::Array(items) if !items.is_empty() => items.iter().collect(),
        toml::Value::Array(_) => Vec::new(),
        item => vec![item],
    };
    let matches: Option<Vec<StatusMatch>> = items.into_iter().map(one).collect();
    match matches {
        Some(matches) if !matches.is_empty() => Ok(matches),
        _ => Err(format!(
            "invalid expect {value}: expected a status class or code from 100 to 599, or a list of them, such as \"2xx\" or [\"2xx\", 304]"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expect_takes_classes_codes_and_lists() {
        let check = |text: &str, expected: Option<Vec<StatusMatch>>| {
            let value: toml::Value = toml::from_str::<toml::Table>(&format!("v = {text}"))
                .expect("a valid TOML value")
                .remove("v")
                .expect("the key just written");
            assert_eq!(expect(&value).ok(), expected, "{text}");
        };
        check("\"2xx\"", Some(vec![StatusMatch::Class(2)]));
        check(
            "[\"2xx\", 304]",
            Some(vec![StatusMatch::Class(2), StatusMatch::Code(304)]),
        );
        check("\"204\"", Some(vec![StatusMatch::Code(204)]));
        check("[]", None);
        check("\"6xx\"", None);
        check("700", None);
        check("true", None);
    }

    #[test]
    fn matches_by_class_or_code() {
        assert!(StatusMatch::Class(2).matches(204));
        assert!(!StatusMatch::Class(2).matches(304));
        assert!(StatusMatch::Code(304).matches(304));
    }
}
