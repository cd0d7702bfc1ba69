//! `[notify.<name>]`: the channels notifications go to (a webhook, a
//! Slack-style incoming webhook, e-mail over SMTP), each validated into a
//! [`ChannelSpec`]. Secrets (a webhook's signing secret, an SMTP password)
//! are read here, at load time, from the file or variable named, and held
//! as [`Secret`]s: never printed.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;

use super::Secret;
use super::checker::{Checker, Given, Secrets, header_problem, is_name};
use super::environment;
use super::notify_rules::http_url_problem;

/// One `[notify.<name>]` table as written: every key of every kind, so an
/// unknown key gets the nearest one suggested; which keys a kind takes is
/// checked after.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawChannel {
    kind: Option<Spanned<String>>,
    url: Option<Spanned<String>>,
    headers: Option<Spanned<BTreeMap<Given<String>, Given<String>>>>,
    timeout: Option<Spanned<String>>,
    secret_file: Option<Spanned<String>>,
    secret_env: Option<Spanned<String>>,
    host: Option<Spanned<String>>,
    port: Option<Spanned<i64>>,
    tls: Option<Spanned<String>>,
    ca_file: Option<Spanned<String>>,
    username: Option<Spanned<String>>,
    password_file: Option<Spanned<String>>,
    password_env: Option<Spanned<String>>,
    from: Option<Spanned<String>>,
    to: Option<Spanned<Vec<Spanned<String>>>>,
}

/// A channel, validated.
#[derive(Debug, Clone, PartialEq)]
pub enum ChannelSpec {
    /// `kind = "webhook"`: a JSON POST, signed when it has a secret.
    Webhook(WebhookSpec),
    /// `kind = "slack"`: `{"text": …}` to an incoming webhook (Slack,
    /// Mattermost, Rocket.Chat).
    Slack(SlackSpec),
    /// `kind = "email"`: a message over SMTP.
    Email(EmailSpec),
}

impl ChannelSpec {
    /// The kinds, as written in `kind`.
    pub const KINDS: [&str; 3] = ["webhook", "slack", "email"];

    /// How long one delivery attempt may take.
    pub fn timeout(&self) -> Duration {
        match self {
            ChannelSpec::Webhook(spec) => spec.timeout,
            ChannelSpec::Slack(spec) => spec.timeout,
            ChannelSpec::Email(spec) => spec.timeout,
        }
    }

    /// The kind, as written in `kind`.
    pub fn kind(&self) -> &'static str {
        match self {
            ChannelSpec::Webhook(_) => "webhook",
            ChannelSpec::Slack(_) => "slack",
            ChannelSpec::Email(_) => "email",
        }
    }

    /// One line for `check` and logs: where it goes, without a secret (a
    /// URL's path and query, which may hold a token, are left out).
    pub fn describe(&self) -> String {
        match self {
            ChannelSpec::Webhook(w) => {
                let signed = if w.secret.is_some() { ", signed" } else { "" };
                format!("webhook {}{signed}", url_origin(&w.url))
            }
            ChannelSpec::Slack(s) => format!("slack {}", url_origin(&s.url)),
            ChannelSpec::Email(e) => format!(
                "email via {}:{} ({}) from {} to {}",
                e.host,
                e.port,
                e.tls.as_str(),
                e.from,
                e.to.join(", ")
            ),
        }
    }

    /// The variable holding its secret, if it has one from a variable: no
    /// run inherits it.
    pub fn secret_env(&self) -> Option<&str> {
        match self {
            ChannelSpec::Webhook(w) => w.secret_env.as_deref(),
            ChannelSpec::Slack(_) => None,
            ChannelSpec::Email(e) => e.password_env.as_deref(),
        }
    }
}

/// `https://host:port/…`: a URL without what may be a token.
pub fn url_origin(url: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let host = authority.rsplit('@').next().unwrap_or_default();
    let more = if rest.len() > authority.len() {
        "/…"
    } else {
        ""
    };
    format!("{scheme}://{host}{more}")
}

/// A webhook channel.
#[derive(Clone, PartialEq)]
pub struct WebhookSpec {
    pub url: String,
    /// Extra headers, in the order of their names.
    pub headers: Vec<(String, String)>,
    /// For the whole request, body included.
    pub timeout: Duration,
    /// The HMAC-SHA256 key of `Cronlease-Signature`.
    pub secret: Option<Secret>,
    /// The variable `secret_env` names.
    pub secret_env: Option<String>,
}

/// A Slack-style channel.
#[derive(Clone, PartialEq)]
pub struct SlackSpec {
    /// The incoming webhook's URL: its path is a secret.
    pub url: String,
    pub timeout: Duration,
}

/// An e-mail channel.
#[derive(Debug, Clone, PartialEq)]
pub struct EmailSpec {
    pub host: String,
    pub port: u16,
    pub tls: SmtpTls,
    /// PEM roots trusted besides the system's.
    pub ca_file: Option<PathBuf>,
    pub username: Option<String>,
    pub password: Option<Secret>,
    /// The variable `password_env` names.
    pub password_env: Option<String>,
    pub from: String,
    pub to: Vec<String>,
    /// For the whole SMTP conversation.
    pub timeout: Duration,
}

// The URLs may hold tokens (Slack's path is one): Debug shows the origin.
impl fmt::Debug for WebhookSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WebhookSpec")
            .field("url", &url_origin(&self.url))
            .field(
                "headers",
                &self.headers.iter().map(|(n, _)| n).collect::<Vec<_>>(),
            )
            .field("timeout", &self.timeout)
            .field("secret", &self.secret)
            .field("secret_env", &self.secret_env)
            .finish()
    }
}

impl fmt::Debug for SlackSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SlackSpec")
            .field("url", &url_origin(&self.url))
            .field("timeout", &self.timeout)
            .finish()
    }
}

/// How an e-mail channel's SMTP connection is encrypted (`tls`).
///
/// ```
/// use cronlease::SmtpTls;
/// assert_eq!(SmtpTls::default(), SmtpTls::Starttls);
/// assert_eq!(SmtpTls::Implicit.as_str(), "implicit");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum SmtpTls {
    /// Plain connection upgraded with STARTTLS (required), port 587.
    #[default]
    Starttls,
    /// TLS from the first byte, port 465.
    Implicit,
    /// No TLS: for a relay on the same host, port 25.
    None,
}

impl SmtpTls {
    /// The values, as written.
    pub const NAMES: [&str; 3] = ["starttls", "implicit", "none"];

    /// As written in `tls`.
    pub fn as_str(self) -> &'static str {
        match self {
            SmtpTls::Starttls => "starttls",
            SmtpTls::Implicit => "implicit",
            SmtpTls::None => "none",
        }
    }

    /// The port when the channel names none.
    pub fn default_port(self) -> u16 {
        match self {
            SmtpTls::Starttls => 587,
            SmtpTls::Implicit => 465,
            SmtpTls::None => 25,
        }
    }
}

/// The default `timeout` of every channel.
pub const DEFAULT_CHANNEL_TIMEOUT: Duration = Duration::from_secs(10);

/// Headers a webhook may not set besides the connection's: those
/// cronlease sets (lowercase).
const OWN_HEADERS: [&str; 4] = [
    "content-type",
    "user-agent",
    "idempotency-key",
    "cronlease-signature",
];

/// The signature header, also reserved.
pub const SIGNATURE_HEADER: &str = "Cronlease-Signature";

/// Every `[notify.<name>]`, by name; invalid ones left out (their
/// problems recorded).
pub(super) fn validate_channels(
    checker: &mut Checker<'_>,
    raw: Vec<(Spanned<String>, Option<RawChannel>)>,
) -> BTreeMap<String, ChannelSpec> {
    let mut channels = BTreeMap::new();
    for (name, raw) in raw {
        let section = format!("notify.{}", name.get_ref());
        if !is_channel_name(name.get_ref()) {
            checker.problem(
                Some(name.span()),
                Some(&section),
                None,
                format!(
                    "invalid channel name {:?}: expected 1 to 64 characters from A-Z a-z 0-9 _ . -",
                    name.get_ref()
                ),
            );
            continue;
        }
        let Some(raw) = raw else { continue };
        if let Some(spec) = validate_channel(checker, &section, raw) {
            channels.insert(name.into_inner(), spec);
        }
    }
    channels
}

/// One channel: its kind, then that kind's settings.
fn validate_channel(
    checker: &mut Checker<'_>,
    section: &str,
    raw: RawChannel,
) -> Option<ChannelSpec> {
    let expected = format!("expected one of {}", ChannelSpec::KINDS.join(", "));
    let Some(kind) = &raw.kind else {
        let message = format!("missing `kind`: {expected}");
        checker.problem(None, Some(section), Some("kind"), message);
        return None;
    };
    let takes: &[&str] = match kind.get_ref().as_str() {
        "webhook" => &[
            "kind",
            "url",
            "headers",
            "timeout",
            "secret_file",
            "secret_env",
        ],
        "slack" => &["kind", "url", "timeout"],
        "email" => &[
            "kind",
            "host",
            "port",
            "tls",
            "ca_file",
            "username",
            "password_file",
            "password_env",
            "from",
            "to",
            "timeout",
        ],
        other => {
            let message = format!("unknown kind {other:?}: {expected}");
            checker.problem(Some(kind.span()), Some(section), Some("kind"), message);
            return None;
        }
    };
    let mut misplaced = false;
    for (field, at) in raw.keys() {
        if !takes.contains(&field) {
            misplaced = true;
            let message = format!(
                "`{field}` is not a setting of a channel of kind {}: expected {}",
                kind.get_ref(),
                takes
                    .iter()
                    .map(|k| format!("`{k}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
            checker.problem(Some(at), Some(section), Some(field), message);
        }
    }
    let timeout = checker.duration(
        section,
        "timeout",
        raw.timeout.as_ref(),
        DEFAULT_CHANNEL_TIMEOUT,
        Duration::from_secs(300),
    );
    let spec = match kind.get_ref().as_str() {
        "webhook" => webhook(checker, section, raw, timeout).map(ChannelSpec::Webhook),
        "slack" => {
            let url = url(checker, section, raw.url.as_ref());
            url.map(|url| ChannelSpec::Slack(SlackSpec { url, timeout }))
        }
        _ => email(checker, section, raw, timeout).map(ChannelSpec::Email),
    };
    spec.filter(|_| !misplaced)
}

impl RawChannel {
    /// The keys given besides `kind`, with their places.
    fn keys(&self) -> Vec<(&'static str, std::ops::Range<usize>)> {
        let span = |s: Option<std::ops::Range<usize>>, name: &'static str| s.map(|s| (name, s));
        [
            span(self.url.as_ref().map(Spanned::span), "url"),
            span(self.headers.as_ref().map(Spanned::span), "headers"),
            span(self.timeout.as_ref().map(Spanned::span), "timeout"),
            span(self.secret_file.as_ref().map(Spanned::span), "secret_file"),
            span(self.secret_env.as_ref().map(Spanned::span), "secret_env"),
            span(self.host.as_ref().map(Spanned::span), "host"),
            span(self.port.as_ref().map(Spanned::span), "port"),
            span(self.tls.as_ref().map(Spanned::span), "tls"),
            span(self.ca_file.as_ref().map(Spanned::span), "ca_file"),
            span(self.username.as_ref().map(Spanned::span), "username"),
            span(
                self.password_file.as_ref().map(Spanned::span),
                "password_file",
            ),
            span(
                self.password_env.as_ref().map(Spanned::span),
                "password_env",
            ),
            span(self.from.as_ref().map(Spanned::span), "from"),
            span(self.to.as_ref().map(Spanned::span), "to"),
        ]
        .into_iter()
        .flatten()
        .collect()
    }
}

/// `url`: required, http or https.
fn url(
    checker: &mut Checker<'_>,
    section: &str,
    given: Option<&Spanned<String>>,
) -> Option<String> {
    let Some(url) = given else {
        let message = "missing `url`: expected an http:// or https:// URL".to_string();
        checker.problem(None, Some(section), Some("url"), message);
        return None;
    };
    match http_url_problem(url.get_ref()) {
        None => Some(url.get_ref().clone()),
        Some(problem) => {
            // The problem quotes the URL: only its origin, which holds no token.
            let shown = url_origin(url.get_ref());
            let problem = problem.replace(&format!("{:?}", url.get_ref()), &format!("{shown:?}"));
            checker.problem(Some(url.span()), Some(section), Some("url"), problem);
            None
        }
    }
}

/// A webhook's URL, headers and secret.
fn webhook(
    checker: &mut Checker<'_>,
    section: &str,
    raw: RawChannel,
    timeout: Duration,
) -> Option<WebhookSpec> {
    let url = url(checker, section, raw.url.as_ref());
    let mut headers = Vec::new();
    for (name, value) in raw.headers.map(Spanned::into_inner).unwrap_or_default() {
        match header_problem(
            name.get(),
            value.get(),
            &OWN_HEADERS,
            "on every notification: expected another header, such as \"Authorization\"",
        ) {
            Some(problem) => checker.problem(name.at(), Some(section), Some("headers"), problem),
            None => headers.push((name.into_inner(), value.into_inner())),
        }
    }
    let secret_env = raw.secret_env.as_ref().map(|v| v.get_ref().clone());
    let secret = secret(
        checker,
        section,
        ("secret_env", raw.secret_env),
        ("secret_file", raw.secret_file),
    );
    Some(WebhookSpec {
        url: url?,
        headers,
        timeout,
        secret: secret.ok()?,
        secret_env,
    })
}

/// A secret from `env` (a variable) or `file`, at most one of them; read
/// now. Ok(None) when neither is set; Err when the one set is not usable
/// (the problem is recorded).
fn secret(
    checker: &mut Checker<'_>,
    section: &str,
    (env_field, env): (&str, Option<Spanned<String>>),
    (file_field, file): (&str, Option<Spanned<String>>),
) -> Result<Option<Secret>, ()> {
    let skip = checker.secrets == Secrets::Skip;
    let mut problem = |at, field: &str, message: String| {
        checker.problem(Some(at), Some(section), Some(field), message);
        Err(())
    };
    match (env, file) {
        (None, None) => Ok(None),
        (Some(_), Some(file)) => problem(
            file.span(),
            file_field,
            format!("both `{env_field}` and `{file_field}` are set: expected one of them"),
        ),
        _ if skip => Ok(Some(Secret::new(String::new()))),
        (Some(name), None) => match environment::non_empty_var(name.get_ref()) {
            Some(value) => Ok(Some(Secret::new(value))),
            None => problem(
                name.span(),
                env_field,
                format!(
                    "environment variable {:?} is not set or empty: expected it to hold the secret (under systemd: `Environment=` or `EnvironmentFile=` in a drop-in, or a credential)",
                    name.get_ref()
                ),
            ),
        },
        (None, Some(path)) => match environment::read_password_file(path.get_ref()) {
            Ok(Some(value)) => Ok(Some(Secret::new(value))),
            Ok(None) => problem(
                path.span(),
                file_field,
                format!(
                    "{} is empty: expected the secret on its first line",
                    path.get_ref()
                ),
            ),
            Err(e) => problem(
                path.span(),
                file_field,
                format!(
                    "cannot read {}: {e}: expected a readable file holding the secret",
                    path.get_ref()
                ),
            ),
        },
    }
}

/// An e-mail channel's server, TLS, login and addresses.
fn email(
    checker: &mut Checker<'_>,
    section: &str,
    raw: RawChannel,
    timeout: Duration,
) -> Option<EmailSpec> {
    let tls = smtp_tls(checker, section, raw.tls.as_ref())?;
    let host = required_text(
        checker,
        section,
        "host",
        raw.host.as_ref(),
        "\"smtp.example.com\"",
    );
    let port = match &raw.port {
        None => tls.default_port(),
        Some(_) => {
            let port = checker.integer(section, "port", raw.port.as_ref(), 0, 1..65_536);
            u16::try_from(port).unwrap_or(0)
        }
    };
    let ca_file = raw
        .ca_file
        .as_ref()
        .and_then(|path| ca_file(checker, section, path));
    let from = required_text(
        checker,
        section,
        "from",
        raw.from.as_ref(),
        "\"cron@example.com\"",
    )
    .filter(|from| {
        address(
            checker,
            section,
            "from",
            raw.from.as_ref().map(Spanned::span),
            from,
        )
    });
    let login = login(checker, section, &raw, tls, host.as_deref());
    let to = recipients(checker, section, raw.to);
    let password_env = raw.password_env.as_ref().map(|v| v.get_ref().clone());
    let password = secret(
        checker,
        section,
        ("password_env", raw.password_env),
        ("password_file", raw.password_file),
    );
    let password = password.ok()?;
    if login.is_some() != password.is_some() {
        return None;
    }
    Some(EmailSpec {
        host: host?,
        port: (port != 0).then_some(port)?,
        tls,
        ca_file,
        username: login,
        password,
        password_env,
        from: from?,
        to: to?,
        timeout,
    })
}

/// `tls`: one of [`SmtpTls::NAMES`], starttls when unset.
fn smtp_tls(
    checker: &mut Checker<'_>,
    section: &str,
    given: Option<&Spanned<String>>,
) -> Option<SmtpTls> {
    let Some(tls) = given else {
        return Some(SmtpTls::default());
    };
    match SmtpTls::NAMES.iter().position(|n| n == tls.get_ref()) {
        Some(0) => Some(SmtpTls::Starttls),
        Some(1) => Some(SmtpTls::Implicit),
        Some(_) => Some(SmtpTls::None),
        None => {
            let message = format!(
                "invalid value {:?}: expected one of {}",
                tls.get_ref(),
                SmtpTls::NAMES.join(", ")
            );
            checker.problem(Some(tls.span()), Some(section), Some("tls"), message);
            None
        }
    }
}

/// `ca_file`: a readable file (parsed when the channel is built).
fn ca_file(checker: &mut Checker<'_>, section: &str, path: &Spanned<String>) -> Option<PathBuf> {
    match environment::check_readable(path.get_ref()) {
        Ok(()) => Some(PathBuf::from(path.get_ref())),
        Err(e) => {
            let message = format!(
                "cannot read {}: {e}: expected a PEM file of CA certificates",
                path.get_ref()
            );
            checker.problem(Some(path.span()), Some(section), Some("ca_file"), message);
            None
        }
    }
}

/// `username` with a password, or neither; no password over a plain
/// connection to another host.
fn login(
    checker: &mut Checker<'_>,
    section: &str,
    raw: &RawChannel,
    tls: SmtpTls,
    host: Option<&str>,
) -> Option<String> {
    let has_password = raw.password_env.is_some() || raw.password_file.is_some();
    match &raw.username {
        None if has_password => {
            let at = raw
                .password_env
                .as_ref()
                .or(raw.password_file.as_ref())
                .map(Spanned::span);
            let message = "a password without `username`: expected both, or neither".to_string();
            checker.problem(at, Some(section), Some("username"), message);
            None
        }
        None => None,
        Some(user) if !has_password => {
            let message =
                "`username` without a password: expected `password_env` or `password_file` too"
                    .to_string();
            checker.problem(
                Some(user.span()),
                Some(section),
                Some("password_env"),
                message,
            );
            None
        }
        Some(user) => {
            let local = matches!(host, Some("localhost" | "127.0.0.1" | "::1"));
            if tls == SmtpTls::None && !local {
                let message = "a password would cross the network unencrypted with tls = \"none\": expected tls = \"starttls\" or \"implicit\" (\"none\" is for a relay on this host)".to_string();
                checker.problem(Some(user.span()), Some(section), Some("tls"), message);
            }
            Some(user.get_ref().clone())
        }
    }
}

/// A required piece of text: present and not blank.
fn required_text(
    checker: &mut Checker<'_>,
    section: &str,
    field: &str,
    given: Option<&Spanned<String>>,
    example: &str,
) -> Option<String> {
    match given {
        Some(text) if !text.get_ref().trim().is_empty() => Some(text.get_ref().trim().to_string()),
        Some(text) => {
            let message = format!("empty `{field}`: expected e.g. {example}");
            checker.problem(Some(text.span()), Some(section), Some(field), message);
            None
        }
        None => {
            let message = format!("missing `{field}`: expected e.g. {field} = {example}");
            checker.problem(None, Some(section), Some(field), message);
            None
        }
    }
}

/// `to`: at least one address.
fn recipients(
    checker: &mut Checker<'_>,
    section: &str,
    given: Option<Spanned<Vec<Spanned<String>>>>,
) -> Option<Vec<String>> {
    let Some(given) = given else {
        let message =
            "missing `to`: expected a list of addresses, such as to = [\"ops@example.com\"]"
                .to_string();
        checker.problem(None, Some(section), Some("to"), message);
        return None;
    };
    if given.get_ref().is_empty() {
        let message =
            "no address: expected at least one, such as to = [\"ops@example.com\"]".to_string();
        checker.problem(Some(given.span()), Some(section), Some("to"), message);
        return None;
    }
    let mut valid = true;
    for to in given.get_ref() {
        valid &= address(checker, section, "to", Some(to.span()), to.get_ref());
    }
    valid.then(|| {
        given
            .into_inner()
            .into_iter()
            .map(|t| t.into_inner().trim().to_string())
            .collect()
    })
}

/// Whether `text` is a mailbox (`a@b` or `Name <a@b>`); a problem when not.
fn address(
    checker: &mut Checker<'_>,
    section: &str,
    field: &str,
    at: Option<std::ops::Range<usize>>,
    text: &str,
) -> bool {
    let text = text.trim();
    let addr = match text.rsplit_once('<') {
        Some((_, rest)) => rest.strip_suffix('>').unwrap_or(""),
        None => text,
    };
    let plain = addr.split_once('@').is_some_and(|(local, domain)| {
        !local.is_empty() && !domain.is_empty() && !domain.contains('@')
    });
    let clean = !addr.chars().any(|c| c.is_whitespace() || c.is_control())
        && !text.chars().any(char::is_control);
    #[cfg(feature = "notify")]
    let parses = text.parse::<lettre::message::Mailbox>().is_ok();
    #[cfg(not(feature = "notify"))]
    let parses = true;
    let valid = plain && clean && parses;
    if !valid {
        let message = format!(
            "invalid address {text:?}: expected e.g. \"cron@example.com\" or \"Cron <cron@example.com>\""
        );
        checker.problem(at, Some(section), Some(field), message);
    }
    valid
}

/// Whether `name` can name a channel: `[A-Za-z0-9_.-]`, 1 to 64
/// characters (it goes into Redis keys' fields and the scripts' rules).
pub(crate) fn is_channel_name(name: &str) -> bool {
    is_name(name, 64)
}
