//! `kind = "slack"`: one readable message, `{"text": …}`, to an incoming
//! webhook (Slack's, and what Mattermost and Rocket.Chat accept), with
//! the `Idempotency-Key` header all the same.

use reqwest::header::HeaderMap;

use super::post::{header, post};
use super::{Event, Receipt, SendError};
use crate::config::SlackSpec;

/// The most of a message: Slack cuts a `text` near 40,000 characters, and
/// a message that long is read by nobody.
const MESSAGE_LIMIT: usize = 4000;

/// A Slack-style channel, ready to send.
pub(super) struct Slack {
    url: String,
    timeout: std::time::Duration,
    client: reqwest::Client,
}

impl Slack {
    pub(super) fn new(spec: &SlackSpec, client: reqwest::Client) -> Slack {
        Slack {
            url: spec.url.clone(),
            timeout: spec.timeout,
            client,
        }
    }

    pub(super) async fn send(
        &self,
        event: &Event,
        dashboard_url: Option<&str>,
    ) -> Result<Receipt, SendError> {
        let text = message(event, dashboard_url);
        let body = serde_json::json!({ "text": text }).to_string().into_bytes();
        let mut headers = HeaderMap::new();
        headers.extend(header("Idempotency-Key", &event.key));
        post(&self.client, &self.url, headers, body, self.timeout).await
    }
}

/// The message: the subject in bold, the facts, the link, the output tail
/// in a code block; at most [`MESSAGE_LIMIT`] bytes (the tail is what is
/// cut, from its start).
pub(super) fn message(event: &Event, dashboard_url: Option<&str>) -> String {
    let text = event.text(dashboard_url, "```\n");
    let text = match text.split_once('\n') {
        Some((subject, rest)) => format!("*{subject}*\n{rest}"),
        None => format!("*{text}*"),
    };
    if text.len() <= MESSAGE_LIMIT {
        return text;
    }
    let mut shorter = event.clone();
    if let Some(tail) = &event.output_tail {
        let excess = text.len() - MESSAGE_LIMIT;
        let mut start = excess.min(tail.len());
        while !tail.is_char_boundary(start) {
            start += 1;
        }
        shorter.output_tail = Some(tail[start..].to_string());
        let text = message_unbounded(&shorter, dashboard_url);
        if text.len() <= MESSAGE_LIMIT {
            return text;
        }
    }
    let mut end = MESSAGE_LIMIT;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

fn message_unbounded(event: &Event, dashboard_url: Option<&str>) -> String {
    let text = event.text(dashboard_url, "```\n");
    match text.split_once('\n') {
        Some((subject, rest)) => format!("*{subject}*\n{rest}"),
        None => format!("*{text}*"),
    }
}
