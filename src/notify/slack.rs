//! `kind = "slack"`: one readable message, `{"text": …}`, to an incoming
//! webhook (Slack's, and what Mattermost and Rocket.Chat accept), with
//! the `Idempotency-Key` header all the same.

use reqwest::header::HeaderMap;

use super::post::{idempotency_key, post};
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
        headers.extend([idempotency_key(&event.key)?]);
        post(&self.client, &self.url, headers, body, self.timeout).await
    }
}

/// The message: the subject in bold, the facts, the link, the output tail
/// in a code block; at most [`MESSAGE_LIMIT`] bytes (the tail is what is
/// cut, from its start; then, if still too long, the message's end).
pub(super) fn message(event: &Event, dashboard_url: Option<&str>) -> String {
    let mut text = unbounded(event, dashboard_url);
    if text.len() > MESSAGE_LIMIT
        && let Some(tail) = &event.output_tail
    {
        let mut start = (text.len() - MESSAGE_LIMIT).min(tail.len());
        while !tail.is_char_boundary(start) {
            start += 1;
        }
        let mut shorter = event.clone();
        shorter.output_tail = Some(tail[start..].to_string());
        text = unbounded(&shorter, dashboard_url);
    }
    if text.len() <= MESSAGE_LIMIT {
        return text;
    }
    let mut end = MESSAGE_LIMIT;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

/// The message, however long.
fn unbounded(event: &Event, dashboard_url: Option<&str>) -> String {
    let text = event.text(dashboard_url, "```\n");
    match text.split_once('\n') {
        Some((subject, rest)) => format!("*{subject}*\n{rest}"),
        None => format!("*{text}*"),
    }
}
