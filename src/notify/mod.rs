//! Notification channels: what sends one [`Event`] to a webhook, a
//! Slack-style incoming webhook or an e-mail address, and says what the
//! receiver answered ([`Receipt`]) or why it did not take it
//! ([`SendError`], permanent or worth retrying).
//!
//! Which events exist and where they go is decided elsewhere: the rules
//! are read by `config` (`Job::notify`, `DaemonConfig::notify`), and the
//! events are written to Redis by the script that records the outcome
//! causing them and delivered by a live replica. This module only sends:
//! [`Channels::build`] once from the config's channel specs (one HTTP
//! client for every webhook, one SMTP transport per e-mail channel), then
//! [`Target::send`] per event and channel.
//!
//! Nothing the receiver says reaches a log line as it came: answers are
//! cut to [`ANSWER_LIMIT`] bytes and their control characters escaped
//! ([`printable`]); bodies are read under a limit; every request has the
//! channel's timeout.
//!
//! The files: `event.rs` the event and what every channel says about it
//! (the JSON body, the text, the subject); `post.rs` the HTTP request the
//! webhook and Slack channels share; `webhook.rs`, `slack.rs` and
//! `email.rs` each kind; `channel.rs` the library's [`Channel`], a channel
//! described by code.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::config::ChannelSpec;

mod channel;
mod email;
mod event;
mod post;
/// The channels' HTTP client (rustls with ring, the system's roots, no
/// redirects), which the dashboard's single sign-on also asks its provider
/// with.
#[cfg(feature = "dashboard")]
pub(crate) use post::client as http_client;
mod slack;
mod webhook;

pub use channel::Channel;
pub use event::{Event, new_key};

/// The most of a receiver's answer kept in a [`Receipt`] or an error.
pub const ANSWER_LIMIT: usize = 200;

/// What the receiver said when it took the event: `HTTP 200 OK: <the
/// first 200 bytes of the body>`, or the SMTP server's last reply
/// (`250 2.0.0 Ok: queued as …`), escaped by [`printable`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Receipt {
    pub answer: String,
}

/// Why a channel did not take an event.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SendError {
    /// No answer within the channel's timeout.
    #[error("no answer within {}", humantime::format_duration(*.0))]
    Timeout(Duration),
    /// The receiver could not be reached (DNS, refused, reset, TLS).
    #[error("cannot reach the receiver: {0}")]
    Connect(String),
    /// An HTTP answer other than 2xx.
    #[error("HTTP {status}: {body}")]
    Http {
        status: u16,
        /// The first bytes of the body, escaped.
        body: String,
    },
    /// The SMTP server refused (a 4xx or 5xx reply); `code` 0 when it did
    /// not say which.
    #[error("SMTP server refused: {message}")]
    Smtp {
        code: u16,
        /// Its reply, escaped.
        message: String,
    },
    /// The message could not be made (an address the SMTP library refuses).
    #[error("cannot build the message: {0}")]
    Message(String),
}

impl SendError {
    /// Whether retrying cannot help: an HTTP 4xx other than 408 and 429,
    /// an SMTP 5xx (a refused recipient included), a message that cannot
    /// be made. Timeouts, connection errors, HTTP 5xx, 408, 429 and SMTP
    /// 4xx are worth retrying.
    pub fn is_permanent(&self) -> bool {
        match self {
            SendError::Timeout(_) | SendError::Connect(_) => false,
            SendError::Http { status, .. } => {
                (400..500).contains(status) && !matches!(status, 408 | 429)
            }
            SendError::Smtp { code, .. } => (500..600).contains(code),
            SendError::Message(_) => true,
        }
    }
}

/// Why the channels could not be built from the config.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BuildError {
    /// The HTTP client of the webhook and Slack channels.
    #[error("cannot build the HTTP client of the notification channels: {0}")]
    Http(String),
    /// One channel.
    #[error("notification channel {name:?}: {message}")]
    Channel { name: String, message: String },
}

/// Every channel of the config, ready to send.
pub struct Channels {
    by_name: BTreeMap<String, Target>,
    /// The longest of the channels' timeouts.
    longest_timeout: Duration,
}

/// One channel, ready to send.
pub struct Target {
    how: How,
}

/// What a target sends with.
enum How {
    Webhook(webhook::Webhook),
    Slack(slack::Slack),
    Email(email::Email),
}

impl Channels {
    /// The channels of `specs` (a config's `notify`): one HTTP client for
    /// all that speak HTTP, an SMTP transport per e-mail channel.
    pub fn build(specs: &BTreeMap<String, ChannelSpec>) -> Result<Channels, BuildError> {
        let needs_http = specs
            .values()
            .any(|s| matches!(s, ChannelSpec::Webhook(_) | ChannelSpec::Slack(_)));
        let client = if needs_http {
            Some(post::client().map_err(BuildError::Http)?)
        } else {
            None
        };
        let mut by_name = BTreeMap::new();
        for (name, spec) in specs {
            let failed = |message: String| BuildError::Channel {
                name: name.clone(),
                message,
            };
            let how = match (spec, &client) {
                (ChannelSpec::Webhook(w), Some(client)) => {
                    How::Webhook(webhook::Webhook::new(w, client.clone()))
                }
                (ChannelSpec::Slack(s), Some(client)) => {
                    How::Slack(slack::Slack::new(s, client.clone()))
                }
                (ChannelSpec::Email(e), _) => How::Email(email::Email::new(e).map_err(failed)?),
                (_, None) => unreachable!("an HTTP client is built when a channel speaks HTTP"),
            };
            by_name.insert(name.clone(), Target { how });
        }
        let longest_timeout = specs
            .values()
            .map(ChannelSpec::timeout)
            .max()
            .unwrap_or_default();
        Ok(Channels {
            by_name,
            longest_timeout,
        })
    }

    /// The longest time one attempt through any channel may take: a
    /// delivery idle for longer is not in flight any more.
    pub fn longest_timeout(&self) -> Duration {
        self.longest_timeout
    }

    /// Whether there are no channels.
    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }

    /// The channel named `name`.
    pub fn get(&self, name: &str) -> Option<&Target> {
        self.by_name.get(name)
    }
}

impl Target {
    /// Sends `event`; `dashboard_url` is the configured base URL, if any
    /// (`[daemon] dashboard_url`), for links. One attempt, bounded by the
    /// channel's timeout: retrying is the caller's.
    pub async fn send(
        &self,
        event: &Event,
        dashboard_url: Option<&str>,
    ) -> Result<Receipt, SendError> {
        match &self.how {
            How::Webhook(webhook) => webhook.send(event, dashboard_url).await,
            How::Slack(slack) => slack.send(event, dashboard_url).await,
            How::Email(email) => email.send(event, dashboard_url).await,
        }
    }
}

/// `text` cut to [`ANSWER_LIMIT`] bytes (at a character boundary, with
/// `…` when cut) and made inert ([`crate::inert::escape`]): safe to print
/// and to log.
pub fn printable(text: &str) -> String {
    let mut end = text.len().min(ANSWER_LIMIT);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let mut out = crate::inert::escape(&text[..end]).into_owned();
    if end < text.len() {
        out.push('…');
    }
    out
}
