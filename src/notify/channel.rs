//! [`Channel`]: a notification channel described by code, for an
//! embedded scheduler — the `[notify.<name>]` table of a job table, with
//! its secret given as a value instead of a file or a variable.

use std::path::Path;
use std::time::Duration;

use crate::config::{ChannelSpec, Secret, SmtpTls};

/// A notification channel of an embedded scheduler: where the events of
/// its jobs go (a webhook, a Slack-style incoming webhook, or e-mail).
///
/// Given to [`SchedulerBuilder::channel`](crate::SchedulerBuilder::channel)
/// under a name that jobs list in
/// [`JobBuilder::notify`](crate::JobBuilder::notify). Nothing is checked
/// here: the scheduler's start checks each channel as `cronlease check`
/// checks a `[notify.<name>]` table. Secrets given here are never
/// printed, `Debug` included.
///
/// ```
/// use std::time::Duration;
/// use cronlease::Channel;
///
/// let ops = Channel::webhook("https://hooks.example.com/cron")
///     .secret("s3cr3t-shared-with-the-receiver")
///     .header("X-Team", "payments")
///     .timeout(Duration::from_secs(5));
/// assert!(!format!("{ops:?}").contains("s3cr3t"));
/// ```
#[derive(Clone)]
pub struct Channel {
    /// The table as a job table would hold it (no secret in it).
    pub(crate) table: toml::Table,
    /// The webhook's signing secret.
    pub(crate) secret: Option<Secret>,
    /// The SMTP login: user and password.
    pub(crate) login: Option<(String, Secret)>,
}

impl Channel {
    fn of_kind(kind: &str) -> Channel {
        let mut table = toml::Table::new();
        table.insert("kind".into(), kind.into());
        Channel {
            table,
            secret: None,
            login: None,
        }
    }

    fn set(mut self, key: &str, value: toml::Value) -> Channel {
        self.table.insert(key.into(), value);
        self
    }

    /// A webhook: each event POSTed to `url` (http or https) as a JSON
    /// object, with an `Idempotency-Key` header that is the same for every
    /// retry of the event.
    ///
    /// ```
    /// let ops = cronlease::Channel::webhook("https://hooks.example.com/cron");
    /// ```
    pub fn webhook(url: &str) -> Channel {
        Channel::of_kind("webhook").set("url", url.into())
    }

    /// A Slack incoming webhook (or Mattermost's, or Rocket.Chat's): each
    /// event as one readable message, `{"text": …}`.
    ///
    /// ```
    /// let chat = cronlease::Channel::slack("https://hooks.slack.com/services/T000/B000/XXXX");
    /// ```
    pub fn slack(url: &str) -> Channel {
        Channel::of_kind("slack").set("url", url.into())
    }

    /// E-mail through the SMTP server `host` (STARTTLS on port 587 unless
    /// [`Channel::tls`] and [`Channel::port`] say otherwise), from `from`
    /// to each of `to`.
    ///
    /// ```
    /// let mail = cronlease::Channel::email("smtp.example.com", "cron@example.com", &["ops@example.com"]);
    /// ```
    pub fn email(host: &str, from: &str, to: &[&str]) -> Channel {
        let to: Vec<toml::Value> = to.iter().map(|a| (*a).into()).collect();
        Channel::of_kind("email")
            .set("host", host.into())
            .set("from", from.into())
            .set("to", to.into())
    }

    /// A webhook's signing secret: each request then carries
    /// `Cronlease-Signature: sha256=<hex HMAC-SHA256 of the body>`.
    ///
    /// ```
    /// let ops = cronlease::Channel::webhook("https://hooks.example.com/cron").secret("s3cr3t");
    /// ```
    pub fn secret(mut self, secret: &str) -> Channel {
        self.secret = Some(Secret::new(secret.to_string()));
        self
    }

    /// A header every request of a webhook carries (not one cronlease or
    /// the connection sets: `Content-Type`, `User-Agent`,
    /// `Idempotency-Key`, `Host`, …).
    ///
    /// ```
    /// let ops = cronlease::Channel::webhook("https://hooks.example.com/cron")
    ///     .header("Authorization", "Bearer abc");
    /// ```
    pub fn header(mut self, name: &str, value: &str) -> Channel {
        let headers = self
            .table
            .entry("headers")
            .or_insert_with(|| toml::Table::new().into());
        if let toml::Value::Table(headers) = headers {
            headers.insert(name.into(), value.into());
        }
        self
    }

    /// How long one delivery attempt may take (default 10 s, at most 5
    /// min), in whole milliseconds.
    ///
    /// ```
    /// use std::time::Duration;
    /// let ops = cronlease::Channel::webhook("https://hooks.example.com/cron").timeout(Duration::from_secs(3));
    /// ```
    pub fn timeout(self, timeout: Duration) -> Channel {
        let text = format!("{}ms", timeout.as_millis());
        self.set("timeout", text.into())
    }

    /// An e-mail channel's port (default: 587 with STARTTLS, 465 with
    /// implicit TLS, 25 without).
    ///
    /// ```
    /// let mail = cronlease::Channel::email("smtp.example.com", "cron@example.com", &["ops@example.com"]).port(2525);
    /// ```
    pub fn port(self, port: u16) -> Channel {
        self.set("port", i64::from(port).into())
    }

    /// An e-mail channel's TLS (default [`SmtpTls::Starttls`]).
    ///
    /// ```
    /// use cronlease::{Channel, SmtpTls};
    /// let mail = Channel::email("smtp.example.com", "cron@example.com", &["ops@example.com"]).tls(SmtpTls::Implicit);
    /// ```
    pub fn tls(self, tls: SmtpTls) -> Channel {
        self.set("tls", tls.as_str().into())
    }

    /// PEM CA certificates an e-mail channel trusts besides the system's
    /// (a private CA).
    ///
    /// ```
    /// use std::path::Path;
    /// let mail = cronlease::Channel::email("smtp.internal", "cron@example.com", &["ops@example.com"])
    ///     .ca_file(Path::new("/etc/ssl/private-ca.pem"));
    /// ```
    pub fn ca_file(self, path: &Path) -> Channel {
        self.set("ca_file", path.to_string_lossy().as_ref().into())
    }

    /// An e-mail channel's SMTP login (sent only over TLS).
    ///
    /// ```
    /// let mail = cronlease::Channel::email("smtp.example.com", "cron@example.com", &["ops@example.com"])
    ///     .login("cron", "app-password");
    /// ```
    pub fn login(mut self, username: &str, password: &str) -> Channel {
        self.login = Some((username.to_string(), Secret::new(password.to_string())));
        self
    }

    /// `spec` (this channel, validated) with the secrets given by code.
    pub(crate) fn add_secrets(&self, spec: &mut ChannelSpec) {
        match spec {
            ChannelSpec::Webhook(webhook) if self.secret.is_some() => {
                webhook.secret = self.secret.clone();
            }
            ChannelSpec::Email(email) => {
                if let Some((user, password)) = &self.login {
                    email.username = Some(user.clone());
                    email.password = Some(password.clone());
                }
            }
            _ => {}
        }
    }
}

// The table holds no secret; the secrets are shown as `***`.
impl std::fmt::Debug for Channel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = self.table.get("kind").and_then(toml::Value::as_str);
        f.debug_struct("Channel")
            .field("kind", &kind)
            .field("secret", &self.secret)
            .field("login", &self.login.as_ref().map(|(user, _)| (user, "***")))
            .finish_non_exhaustive()
    }
}
