//! One notification and what every channel says about it: the webhook's
//! JSON body, the one-message text of chat channels, an e-mail's subject
//! and body.

use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::{Value, json};

use crate::config::EventKind;

/// The most of a run's output tail a chat message or an e-mail shows:
/// the end of it, where the error usually is.
const TEXT_TAIL: usize = 2000;

/// One notification, as the delivery read it from Redis (or as `notify
/// test` made it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    pub kind: EventKind,
    /// The idempotency key: the same for every retry and every replica
    /// (webhooks' `Idempotency-Key`, e-mails' `Message-ID`).
    pub key: String,
    pub job: Option<String>,
    /// The tick, ms since the epoch (UTC).
    pub tick_ms: Option<i64>,
    pub run_id: Option<String>,
    pub fence: Option<u64>,
    pub replica: Option<String>,
    /// The outcome's status (`failed`, `timeout`, …).
    pub status: Option<String>,
    pub attempt: Option<u32>,
    /// The end of the run's output, as recorded.
    pub output_tail: Option<String>,
    /// When it happened, ms since the epoch (Redis time).
    pub occurred_ms: i64,
    /// A human sentence; when absent, one is made from the rest.
    pub detail: Option<String>,
}

/// A fresh idempotency key (a UUID v4): for `notify test`, and for events
/// that have no natural key.
pub fn new_key() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// `ms` as RFC 3339 UTC with milliseconds, if it is a representable time.
fn rfc3339(ms: i64) -> Option<String> {
    DateTime::<Utc>::from_timestamp_millis(ms)
        .map(|t| t.to_rfc3339_opts(SecondsFormat::Millis, true))
}

impl Event {
    /// The link to the event's page on the dashboard at `base`: the job's,
    /// or the overview for a replica's event.
    pub fn dashboard_link(&self, base: Option<&str>) -> Option<String> {
        let base = base?.trim_end_matches('/');
        Some(match &self.job {
            Some(job) => format!("{base}/jobs/{job}"),
            None => format!("{base}/"),
        })
    }

    /// [`Event::detail`], or a sentence made from the event.
    pub fn sentence(&self) -> String {
        if let Some(detail) = &self.detail {
            return detail.clone();
        }
        let job = self
            .job
            .as_deref()
            .map_or("a job".to_string(), |j| format!("job {j}"));
        let attempt = self
            .attempt
            .map(|a| format!(" (attempt {a})"))
            .unwrap_or_default();
        match self.kind {
            EventKind::Failed => format!("{job} failed{attempt}"),
            EventKind::Timeout => format!("{job} timed out{attempt}"),
            EventKind::Recovered => format!("{job} succeeded again after failing"),
            EventKind::Missed => format!("{job} missed a tick: no replica ran it"),
            EventKind::LostLease => format!("{job} was stopped: its replica lost the lease"),
            EventKind::Abandoned => format!("{job}'s replica died during the run"),
            EventKind::Late => format!("{job} started late"),
            EventKind::Overdue => format!("{job} has not succeeded within its expected time"),
            EventKind::ReplicaDead => match &self.replica {
                Some(replica) => format!("replica {replica} stopped sending heartbeats"),
                None => "a replica stopped sending heartbeats".to_string(),
            },
            EventKind::Test => "a test notification from `cronlease notify test`".to_string(),
        }
    }

    /// The webhook's body: every field, absent ones `null`.
    pub fn json(&self, dashboard_url: Option<&str>) -> Value {
        json!({
            "event": self.kind.as_str(),
            "job": self.job,
            "tick": self.tick_ms.and_then(rfc3339),
            "run_id": self.run_id,
            "fence": self.fence,
            "replica": self.replica,
            "status": self.status,
            "attempt": self.attempt,
            "output_tail": self.output_tail,
            "dashboard_url": self.dashboard_link(dashboard_url),
            "occurred_at": rfc3339(self.occurred_ms),
            "detail": self.sentence(),
            "idempotency_key": self.key,
        })
    }

    /// A one-line summary: an e-mail's subject, a chat message's first line.
    pub fn subject(&self) -> String {
        let what = match &self.job {
            Some(job) => format!("{job}: {}", self.kind.as_str()),
            None => self.kind.as_str().to_string(),
        };
        // A subject is one line whatever the job's name or detail holds.
        let line = format!("[cronlease] {what}: {}", self.sentence());
        line.chars()
            .map(|c| if c.is_control() { ' ' } else { c })
            .collect()
    }

    /// The facts, one `name: value` line each, then the link and the
    /// output tail (its end, at most [`TEXT_TAIL`] bytes) under `fence`
    /// (a code block's marks for chat, nothing for e-mail).
    pub fn text(&self, dashboard_url: Option<&str>, fence: &str) -> String {
        let mut lines = vec![self.subject()];
        let facts = [
            ("event", Some(self.kind.as_str().to_string())),
            ("job", self.job.clone()),
            ("tick", self.tick_ms.and_then(rfc3339)),
            ("status", self.status.clone()),
            ("attempt", self.attempt.map(|a| a.to_string())),
            ("replica", self.replica.clone()),
            ("fence", self.fence.map(|f| f.to_string())),
            ("run", self.run_id.clone()),
            ("at", rfc3339(self.occurred_ms)),
        ];
        for (name, value) in facts {
            if let Some(value) = value {
                lines.push(format!("{name}: {value}"));
            }
        }
        if let Some(link) = self.dashboard_link(dashboard_url) {
            lines.push(format!("dashboard: {link}"));
        }
        if let Some(tail) = self.output_tail.as_deref().filter(|t| !t.is_empty()) {
            let mut start = tail.len().saturating_sub(TEXT_TAIL);
            while !tail.is_char_boundary(start) {
                start += 1;
            }
            let cut = if start > 0 { "…" } else { "" };
            // A fence inside the tail would end the code block early.
            let body = tail[start..].replace("```", "`\u{200b}``");
            lines.push(format!("output:\n{fence}{cut}{}\n{fence}", body.trim_end()));
        }
        lines.join("\n")
    }
}
