//! Pausing and resuming: one job (`cronlease pause JOB`, the dashboard's
//! Pause button) or the whole cluster (`cronlease pause --all`, the
//! maintenance switch), until resumed or until a given time, with an
//! optional reason. Every time is Redis time: an end given as a duration
//! counts from Redis's clock, and the scripts refuse an end that is not
//! after it.

use std::time::Duration;

use chrono::DateTime;
use serde::Serialize;

use super::{OperatorError, record_replicas};
use crate::store::{PauseAnswer, PauseRequest, Store};

/// The longest reason a pause takes, in characters.
pub const REASON_MAX_CHARS: usize = 500;

/// When a pause ends by itself, as the operator gave it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Until {
    /// At this instant (Unix ms; RFC 3339 on the command line).
    At(i64),
    /// This long after Redis time when the pause is made (`2h`, `30m`).
    In(Duration),
}

impl Until {
    /// `text` as an RFC 3339 time (`2026-11-26T22:00:00Z`) or a duration
    /// from now (`2h`, `30m`, `1h 30m`).
    pub fn parse(text: &str) -> Result<Until, String> {
        let text = text.trim();
        if let Ok(at) = DateTime::parse_from_rfc3339(text) {
            return Ok(Until::At(at.timestamp_millis()));
        }
        match humantime::parse_duration(text) {
            Ok(d) if d.is_zero() => Err(format!(
                "{text:?} is no time from now: expected a duration such as 30m or 2h"
            )),
            Ok(d) => Ok(Until::In(d)),
            Err(_) => Err(format!(
                "{text:?} is neither an RFC 3339 time (2026-11-26T22:00:00Z) nor a duration from now (30m, 2h)"
            )),
        }
    }

    /// The Redis ms it stands for, given Redis time `now_ms`.
    fn at_ms(self, now_ms: i64) -> i64 {
        match self {
            Until::At(ms) => ms,
            Until::In(d) => now_ms.saturating_add(i64::try_from(d.as_millis()).unwrap_or(i64::MAX)),
        }
    }
}

/// Checks a pause's reason: at most [`REASON_MAX_CHARS`] characters, no
/// control characters (it is shown in terminals and pages).
pub fn check_reason(reason: &str) -> Result<(), String> {
    let chars = reason.chars().count();
    if chars > REASON_MAX_CHARS {
        return Err(format!(
            "the reason is {chars} characters long: at most {REASON_MAX_CHARS}"
        ));
    }
    if let Some(c) = reason.chars().find(|c| c.is_control()) {
        return Err(format!(
            "the reason holds the control character {:?}: expected one line of text",
            c
        ));
    }
    Ok(())
}

/// A pause as an operator asks for it.
#[derive(Debug, Clone, Default)]
pub struct PauseOptions {
    /// When it ends by itself; None: until resumed.
    pub until: Option<Until>,
    /// Why ("" for none); see [`check_reason`].
    pub reason: String,
}

/// What a pause did: when (Redis ms) and until when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Paused {
    pub at_ms: i64,
    pub until_ms: Option<i64>,
}

/// Checks `options` and makes the request, reading Redis time for an end
/// given as a duration.
async fn request_until(
    store: &Store,
    options: &PauseOptions,
) -> Result<Option<i64>, OperatorError> {
    check_reason(&options.reason).map_err(OperatorError::BadPause)?;
    Ok(match options.until {
        None => None,
        Some(until) => Some(until.at_ms(store.server_time_ms().await?)),
    })
}

fn answered(answer: PauseAnswer, until_ms: Option<i64>) -> Result<Paused, OperatorError> {
    match answer {
        PauseAnswer::Done { at_ms } => Ok(Paused { at_ms, until_ms }),
        PauseAnswer::UntilPassed { now_ms } => Err(OperatorError::BadPause(format!(
            "the pause would end at {}, which is not after Redis time ({}): nothing paused",
            super::rfc3339_ms(until_ms.unwrap_or(0)),
            super::rfc3339_ms(now_ms)
        ))),
    }
}

/// Pauses `job` (until resumed, or until `options.until`), with
/// `options.reason`; recorded in the job's actions with who, until and
/// why.
pub async fn pause(
    store: &Store,
    job: &str,
    who: &str,
    options: &PauseOptions,
) -> Result<Paused, OperatorError> {
    let until_ms = request_until(store, options).await?;
    let request = PauseRequest {
        who,
        until_ms,
        reason: &options.reason,
    };
    answered(store.pause(job, &request).await?, until_ms)
}

/// Resumes `job`; returns the Redis time of the change. Recorded in the
/// job's actions. The cluster's pause, if any, still holds it.
pub async fn resume(store: &Store, job: &str, who: &str) -> Result<i64, OperatorError> {
    Ok(store.resume(job, who).await?)
}

/// What `pause --all` or `resume --all` did, and which live replicas did
/// not say they hold it within the wait.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ClusterChange {
    pub id: String,
    pub at_ms: i64,
    pub until_ms: Option<i64>,
    /// The live replicas that acknowledged the change.
    pub confirmed: Vec<String>,
    /// The live replicas that did not within the wait: they may still
    /// start ticks under the record they held.
    pub unconfirmed: Vec<String>,
}

/// Pauses every job of the cluster (the daemons' and the embedded
/// schedulers', jobs added later too) until resumed or until
/// `options.until`, then waits up to `wait` until every live replica
/// acknowledges it (its heartbeat names the pause): once all have, no
/// tick starts anywhere. Recorded in the cluster's actions.
pub async fn pause_all(
    store: &Store,
    who: &str,
    options: &PauseOptions,
    wait: Duration,
) -> Result<ClusterChange, OperatorError> {
    let until_ms = request_until(store, options).await?;
    let id = uuid::Uuid::new_v4().to_string();
    let request = PauseRequest {
        who,
        until_ms,
        reason: &options.reason,
    };
    let paused = answered(store.pause_all(&request, &id).await?, until_ms)?;
    let (confirmed, unconfirmed) = wait_for_replicas(store, &id, wait).await?;
    Ok(ClusterChange {
        id,
        at_ms: paused.at_ms,
        until_ms,
        confirmed,
        unconfirmed,
    })
}

/// Ends the cluster's pause (jobs paused on their own stay paused) and
/// waits, as [`pause_all`] does, for the replicas to acknowledge it.
pub async fn resume_all(
    store: &Store,
    who: &str,
    wait: Duration,
) -> Result<ClusterChange, OperatorError> {
    let id = uuid::Uuid::new_v4().to_string();
    let at_ms = store.resume_all(who, &id).await?;
    let (confirmed, unconfirmed) = wait_for_replicas(store, &id, wait).await?;
    Ok(ClusterChange {
        id,
        at_ms,
        until_ms: None,
        confirmed,
        unconfirmed,
    })
}

/// How often the replicas' heartbeats are read while waiting.
const POLL: Duration = Duration::from_millis(100);

/// Waits up to `wait` until every live replica's heartbeat names the
/// cluster pause record `id`; the live replicas that did and those that
/// did not.
async fn wait_for_replicas(
    store: &Store,
    id: &str,
    wait: Duration,
) -> Result<(Vec<String>, Vec<String>), OperatorError> {
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        let now_ms = store.server_time_ms().await?;
        let (confirmed, unconfirmed) = record_replicas(store, now_ms, id).await?;
        if unconfirmed.is_empty() || tokio::time::Instant::now() >= deadline {
            return Ok((confirmed, unconfirmed));
        }
        tokio::time::sleep(POLL).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn untils_and_reasons() {
        assert_eq!(
            Until::parse("30m"),
            Ok(Until::In(Duration::from_secs(1800)))
        );
        assert_eq!(
            Until::parse("2026-11-26T22:00:00+01:00"),
            Ok(Until::At(1_795_726_800_000))
        );
        assert!(Until::parse("0s").is_err());
        assert!(Until::parse("soon").is_err());
        assert!(check_reason(&"x".repeat(REASON_MAX_CHARS)).is_ok());
        assert!(check_reason(&"x".repeat(REASON_MAX_CHARS + 1)).is_err());
        assert!(check_reason("tab\there").is_err());
        assert!(check_reason("").is_ok());
    }
}
